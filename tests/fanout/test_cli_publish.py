"""`fanout publish` from the command line against the real broker."""

from __future__ import annotations

from fanout.settings import Settings
from schemas import decode_event
from tests.conftest import run_cli
from tests.kafka_helpers import read_topic


def test_publish_file_with_a_bad_line_in_the_middle(settings: Settings) -> None:
    lines = b"\n".join(
        [
            b'{"type":"follow","follower":"u1","followee":"u2"}',
            b'{"type":"follow","follower":"u 1","followee":"u2"}',
            b"",
            b"{broken",
            b'{"type":"post","author":"u2","post_id":"p1","text":"hi"}',
            b'{"type":"unfollow","follower":"u1","followee":"u2"}',
            b'{"type":"fanout_task","author":"u2","post_id":"p1","post_ts":1,"chunk":0,'
            b'"followers":["victim"]}',
        ]
    )
    done = run_cli(settings, "publish", "--file", "-", stdin=lines)
    assert done.returncode == 1
    out = done.stdout.decode()
    assert "published 3, rejected 3, failed 0" in out
    assert "line 2: follower: must be 1..64 characters from [A-Za-z0-9_.:@-]" in out
    assert "line 4: not valid JSON" in out
    assert "line 7: type: fanout_task events are internal: not published by apps" in out
    assert read_topic(settings.kafka, settings.topics.fanout_tasks, 1, timeout=2) == []
    graph = [decode_event(m.value()) for m in read_topic(settings.kafka, settings.topics.graph, 2)]
    assert [e.type for e in graph] == ["follow", "unfollow"]
    assert len(read_topic(settings.kafka, settings.topics.posts, 1)) == 1


def test_publish_single_events_and_reject_bad_ids(settings: Settings) -> None:
    ok = run_cli(settings, "publish", "follow", "u1", "u2", "--group", "work")
    assert ok.returncode == 0 and ok.stdout.startswith(b"published follow ")
    assert run_cli(settings, "publish", "post", "u2", "p9", "--text", "hello").returncode == 0
    bad = run_cli(settings, "publish", "unfollow", "u1", "bad\nid")
    assert bad.returncode != 0
    assert b"invalid event: followee: must be 1..64 characters" in bad.stderr
    missing = run_cli(settings, "publish", "follow", "u1")
    assert missing.returncode != 0 and b"followee: Field required" in missing.stderr
    (event,) = [
        decode_event(m.value()) for m in read_topic(settings.kafka, settings.topics.graph, 1)
    ]
    assert event.type == "follow" and event.group == "work"  # type: ignore[union-attr]
