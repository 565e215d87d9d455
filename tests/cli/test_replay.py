"""`fanout replay`: rebuilds from the log, changes nothing over live state, starts at a time."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from tests.conftest import run_cli
from tests.kafka_helpers import high_watermarks
from timeline_fanout.cli import wiring
from timeline_fanout.cli.settings import Settings
from timeline_fanout.consumers.replay import FromTime, _Probe, resolve
from timeline_fanout.graph import ListKind, ListRef

USERS = [f"u{i}" for i in range(25)]


def snapshot(settings: Settings) -> dict[str, object]:
    store = wiring.edge_store(settings)
    lists = wiring.list_store(settings, store)
    reader = wiring.timeline_reader(settings, store)
    refs = [ListRef(kind, u) for u in USERS for kind in (ListKind.FOLLOWERS, ListKind.FOLLOWING)]
    state: dict[str, object] = {f"{r.kind.value}:{r.user}": lists.read(r) for r in refs}
    state.update({f"tl:{u}": reader.read(u, limit=1000) for u in USERS})
    state["edges"] = {u: store.followers(u) for u in USERS}
    return state


def ok(settings: Settings, *args: str) -> str:
    done = run_cli(settings, *args)
    assert done.returncode == 0, done.stderr.decode()
    return done.stderr.decode()


@pytest.mark.tansu_smoke
def test_replay_rebuilds_an_empty_store_and_cache_and_changes_nothing_over_live_state(
    settings: Settings, tmp_path: Path
) -> None:
    rng = random.Random(4)
    with wiring.publisher(settings) as publisher:
        for _ in range(300):
            a, b = rng.sample(USERS, 2)
            kind = "follow" if rng.random() < 0.7 else "unfollow"
            publisher.publish({"type": kind, "follower": a, "followee": b})
    ok(settings, "consume", "graph", "--until-idle", "3")
    with wiring.publisher(settings) as publisher:
        for i in range(40):
            publisher.publish({"type": "post", "author": rng.choice(USERS), "post_id": f"p{i}"})
    ok(settings, "consume", "fanout", "--until-idle", "3")
    live = snapshot(settings)
    assert any(live[f"tl:{u}"] for u in USERS)

    ok(settings, "replay", "graph", "--from-beginning", "--until-idle", "3")
    ok(settings, "replay", "fanout", "--until-idle", "3")
    assert snapshot(settings) == live  # over live state: nothing changed

    fresh = settings.model_copy(update={"edge_store": f"sqlite:///{tmp_path / 'empty.db'}"})
    wiring.list_store(fresh, wiring.edge_store(fresh)).cache.flush_all()
    summary = ok(fresh, "replay", "graph", "--until-idle", "3")
    assert "replayed 300 events" in summary
    ok(fresh, "replay", "fanout", "--until-idle", "3")
    assert snapshot(fresh) == live  # into an empty store and cache: rebuilt exactly


@dataclass(frozen=True)
class EarlyAndLate:
    moment: datetime  # between the two phases
    early_ends: dict[int, int]  # per partition: the first offset of the late phase


def publish_early_and_late(settings: Settings) -> EarlyAndLate:
    """30 follows of early* users, a pause, a moment, a pause, 20 follows of late* users."""
    with wiring.publisher(settings) as publisher:
        for i in range(30):
            publisher.publish({"type": "follow", "follower": f"early{i}", "followee": f"e{i % 4}"})
    early = high_watermarks(settings.kafka, settings.topics.graph)
    assert sum(early.values()) == 30
    time.sleep(0.3)
    moment = datetime.now(UTC)
    time.sleep(0.3)
    with wiring.publisher(settings) as publisher:
        for i in range(20):
            publisher.publish({"type": "follow", "follower": f"late{i}", "followee": f"e{i % 4}"})
    return EarlyAndLate(moment, early)


def replayed_followers(settings: Settings) -> list[str]:
    store = wiring.edge_store(settings)
    try:
        return sorted(f for i in range(4) for f in store.followers(f"e{i}"))
    finally:
        store.close()


LATE = sorted(f"late{i}" for i in range(20))


@pytest.mark.apache_kafka
def test_replay_from_time_starts_where_the_broker_says_and_knows_how_far_it_goes(
    settings: Settings,
) -> None:
    """Apache Kafka answers ListOffsets by time exactly: the start is its answer (no partition
    scanned), and the progress total of each partition is its log end."""
    run = publish_early_and_late(settings)
    starts = resolve(
        settings.kafka, settings.topics.graph, FromTime(int(run.moment.timestamp() * 1000))
    )
    assert {s.partition: s.offset for s in starts} == run.early_ends
    assert not [s.partition for s in starts if s.scanned]
    ends = high_watermarks(settings.kafka, settings.topics.graph)
    assert {s.partition: s.end for s in starts} == ends and sum(ends.values()) == 50
    out = ok(
        settings, "replay", "graph", "--from-time", run.moment.isoformat(), "--until-idle", "3"
    )
    assert "wrong: found by scanning" not in out
    assert replayed_followers(settings) == LATE


@pytest.mark.apache_kafka  # Tansu has no DeleteRecords
def test_replay_from_time_before_a_trimmed_logs_first_kept_message_starts_there_unscanned(
    settings: Settings,
) -> None:
    """Retention or deleted records move a partition's first kept offset: a time before it
    starts there, as the broker answers, and the message before it (gone) is not asked for."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    run = publish_early_and_late(settings)
    trimmed = {p: end for p, end in run.early_ends.items() if end > 0}
    admin = AdminClient({"bootstrap.servers": settings.kafka})
    asked = [TopicPartition(settings.topics.graph, p, end) for p, end in trimmed.items()]
    for future in admin.delete_records(asked, request_timeout=10).values():
        future.result(timeout=30)
    starts = resolve(settings.kafka, settings.topics.graph, FromTime(0))
    assert {s.partition: s.offset for s in starts if s.partition in trimmed} == trimmed
    assert not [s.partition for s in starts if s.scanned]


BROKER_ANSWERS: dict[str, Callable[[int], int]] = {
    "correct, as Apache Kafka answers": lambda truth: truth,
    "zero": lambda truth: 0,
    "one too late": lambda truth: truth + 1,
    "one too early": lambda truth: max(truth - 1, 0),
}


@pytest.mark.apache_kafka  # the true starts are the high watermarks after the early phase
@pytest.mark.parametrize("answer", BROKER_ANSWERS)
def test_replay_from_time_trusts_only_a_broker_answer_the_messages_confirm(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, answer: str
) -> None:
    """The one question put to the broker (ListOffsets by time) answered in each way it can be:
    a correct answer is taken without scanning, a wrong one is caught by the messages and the
    partition scanned; the start is exact either way."""
    run = publish_early_and_late(settings)
    broker = BROKER_ANSWERS[answer]

    def by_time(probe: _Probe, partitions: list[int], ts_ms: int) -> dict[int, int]:
        return {p: broker(run.early_ends[p]) for p in partitions}

    monkeypatch.setattr(_Probe, "by_time", by_time)
    starts = resolve(
        settings.kafka, settings.topics.graph, FromTime(int(run.moment.timestamp() * 1000))
    )
    assert {s.partition: s.offset for s in starts} == run.early_ends
    wrong = {p for p, end in run.early_ends.items() if broker(end) != end}
    assert {s.partition for s in starts if s.scanned} == wrong


@pytest.mark.apache_kafka
def test_replay_from_offsets_starts_at_the_saved_offsets(
    settings: Settings, tmp_path: Path
) -> None:
    run = publish_early_and_late(settings)
    saved = tmp_path / "offsets.json"
    saved.write_bytes(orjson.dumps({str(p): o for p, o in run.early_ends.items()}))
    ok(settings, "replay", "graph", "--from-offsets", str(saved), "--until-idle", "3")
    assert replayed_followers(settings) == LATE
