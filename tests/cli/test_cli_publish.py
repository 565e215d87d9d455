"""`fanout publish` from the command line against the real broker."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.conftest import run_cli
from tests.kafka_helpers import read_topic
from timeline_fanout.cli.settings import Settings
from timeline_fanout.schemas import PostDeleted, decode_event


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


def test_delete_publishes_a_post_deleted_keyed_by_its_author(settings: Settings) -> None:
    done = run_cli(settings, "publish", "delete", "u2", "p9")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.startswith(b"published post_deleted ")
    with_text = run_cli(settings, "publish", "delete", "u2", "p8", "--text", "gone")
    assert with_text.returncode != 0
    assert b"invalid event: text: Extra inputs are not permitted" in with_text.stderr
    no_id = run_cli(settings, "publish", "delete", "u2")
    assert no_id.returncode != 0 and b"invalid event: post_id: Field required" in no_id.stderr
    (message,) = read_topic(settings.kafka, settings.topics.posts, 2, timeout=5)
    event = decode_event(message.value())
    assert isinstance(event, PostDeleted) and (event.author, event.post_id) == ("u2", "p9")
    assert message.key() == b"u2"


def test_publish_file_takes_post_deleted_lines(settings: Settings) -> None:
    lines = [
        b'{"type":"post_deleted","author":"u2","post_id":"p1"}',
        b'{"type":"post_deleted","author":"u2","post_id":"p2","text":"no"}',
    ]
    done = run_cli(settings, "publish", "--file", "-", stdin=b"\n".join(lines))
    assert done.returncode == 1
    out = done.stdout.decode()
    assert "published 1, rejected 1, failed 0" in out
    assert "line 2: text: Extra inputs are not permitted" in out
    (message,) = read_topic(settings.kafka, settings.topics.posts, 1)
    assert message.key() == b"u2" and decode_event(message.value()).type == "post_deleted"


def test_rejects_file_lists_every_bad_line_as_json(settings: Settings, tmp_path: Path) -> None:
    lines = [b'{"type":"follow","follower":"u1","followee":"u2"}']
    lines += [b'{"type":"follow","follower":"bad id","followee":"u2"}'] * 24 + [b"{"]
    rejects = tmp_path / "rejects.jsonl"
    done = run_cli(
        settings, "publish", "--file", "-", "--rejects", str(rejects), stdin=b"\n".join(lines)
    )
    assert done.returncode == 1
    out = done.stdout.decode()
    assert "published 1, rejected 25, failed 0" in out
    assert "... and 5 more (--rejects FILE lists every one)" in out
    rows = [orjson.loads(line) for line in rejects.read_bytes().splitlines()]
    assert [r["line"] for r in rows] == list(range(2, 27))
    assert rows[0]["reason"] == "follower: must be 1..64 characters from [A-Za-z0-9_.:@-]"
    assert rows[-1]["reason"].startswith("not valid JSON")
    assert set(rows[0]) == {"line", "reason"}


def test_an_unwritable_rejects_file_is_an_error_before_publishing(
    settings: Settings, tmp_path: Path
) -> None:
    event = b'{"type":"follow","follower":"u1","followee":"u2"}'
    nowhere = str(tmp_path / "missing-dir" / "rejects.jsonl")
    done = run_cli(settings, "publish", "--file", "-", "--rejects", nowhere, stdin=event)
    assert done.returncode == 1
    assert done.stderr.decode().strip() == f"--rejects {nowhere}: No such file or directory"
    assert read_topic(settings.kafka, settings.topics.graph, 1, timeout=2) == []


def test_ids_that_start_with_a_dash_go_after_double_dash(settings: Settings) -> None:
    done = run_cli(settings, "publish", "follow", "--", "-lead", "-x")
    assert done.returncode == 0, done.stderr.decode()
    (message,) = read_topic(settings.kafka, settings.topics.graph, 1)
    event = decode_event(message.value())
    assert (event.follower, event.followee) == ("-lead", "-x")  # type: ignore[union-attr]
    assert message.key() == b"-x"
    listed = run_cli(settings, "followers", "--json", "--", "-lead", "u2")
    assert listed.returncode == 0, listed.stderr.decode()
    assert [orjson.loads(line)["user"] for line in listed.stdout.splitlines()] == ["-lead", "u2"]


def test_a_bare_dash_id_fails_with_the_way_out(settings: Settings) -> None:
    done = run_cli(settings, "followers", "-lead")
    assert done.returncode == 2
    assert done.stderr.decode().splitlines()[-1] == (
        "hint: -lead was read as an option; an id that starts with '-' goes after '--', "
        "e.g. fanout followers -- -lead"
    )


def test_help_says_what_the_tool_does(settings: Settings) -> None:
    done = run_cli(settings, "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.decode().split())
    assert "keeps a social follower graph and delivers posts into home timelines" in text
    assert "fanout followers -- -lead" in text
    assert "argument parsing" not in text
