"""The commit policy of the consume loop, with stand-in appliers on the real broker."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.kafka_helpers import read_topic
from timeline_fanout.cli.settings import Settings
from timeline_fanout.consumers import ConsumeLoop, DeadLetters, KafkaSource, Positioned
from timeline_fanout.consumers.dlq_limit import DlqLimit
from timeline_fanout.consumers.halts import DlqLimitExceeded
from timeline_fanout.consumers.pulse import Pulse, no_pulse
from timeline_fanout.memcache import CacheUnavailable
from timeline_fanout.producers import EventPublisher
from timeline_fanout.schemas import Follow


class Recording:
    """Applies everything except events from followers named ``poison...``."""

    accepted: tuple[type, ...] = (Follow,)

    def __init__(self, always_fail: bool = False) -> None:
        self.applied: list[str] = []
        self.always_fail = always_fail

    def apply(self, batch: Sequence[Positioned], pulse: Pulse = no_pulse) -> None:
        for item in batch:
            assert isinstance(item.event, Follow)
            if self.always_fail or item.event.follower.startswith("poison"):
                raise ValueError(f"cannot apply {item.event.follower}")
        self.applied += [item.event.follower for item in batch]  # type: ignore[union-attr]


def loop_for(
    settings: Settings,
    applier: Recording,
    batch_size: int = 1000,
    limit: DlqLimit | None = None,
    max_poll_interval_ms: int = 10000,
) -> ConsumeLoop:
    group = f"{settings.group}.loop"
    return ConsumeLoop(
        KafkaSource(
            settings.kafka,
            group,
            [settings.topics.graph],
            max_poll_interval_ms=max_poll_interval_ms,
        ),
        applier,
        DeadLetters(settings.kafka, settings.topics.dlq, group),
        threading.Event(),
        batch_size=batch_size,
        dlq_limit=limit or DlqLimit(),
    )


def publish(settings: Settings, followers: list[str]) -> None:
    with EventPublisher(settings.kafka, settings.topics) as publisher:
        for follower in followers:
            publisher.publish({"type": "follow", "follower": follower, "followee": "x"})


def committed_total(settings: Settings) -> int:
    consumer = Consumer({"bootstrap.servers": settings.kafka, "group.id": f"{settings.group}.loop"})
    topic = settings.topics.graph
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    offsets = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
    consumer.close()
    return sum(max(tp.offset, 0) for tp in offsets)


def when(condition: Callable[[], bool], then: Callable[[], None], timeout: float = 90) -> None:
    """In the background: ``then()`` as soon as ``condition()`` holds (or at the timeout)."""

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.05)
        then()

    threading.Thread(target=watch, daemon=True).start()


def test_a_poison_event_is_isolated_and_dead_lettered(settings: Settings) -> None:
    # One partition (the key is the followee). The trailing poison event is held back until the
    # run ends cleanly, then dead-lettered and committed like the other.
    publish(settings, ["a", "b", "poison1", "c", "d", "poison2"])
    applier = Recording()
    loop = loop_for(settings, applier)
    stats = loop.run(until_idle=2.0)
    loop.source.close()
    assert sorted(applier.applied) == ["a", "b", "c", "d"]
    assert (stats.dead_lettered, stats.apply_failed, stats.rejected) == (2, 2, 0)
    dead = read_topic(settings.kafka, settings.topics.dlq, 2)
    reasons = sorted(dict(m.headers())["fanout.dlq.reason"] for m in dead)
    assert reasons == [
        b"apply failed: ValueError: cannot apply poison1",
        b"apply failed: ValueError: cannot apply poison2",
    ]
    assert committed_total(settings) == 6


@pytest.mark.parametrize("batch_size", [1, 1000])
def test_when_every_event_fails_the_loop_halts_with_nothing_dead_lettered_or_committed(
    settings: Settings, batch_size: int
) -> None:
    """The verdict does not depend on batch size: batches of one halt as batches of all do,
    and the failure streak is never dead-lettered."""
    publish(settings, ["a", "b", "c", "d", "e"])
    loop = loop_for(settings, Recording(always_fail=True), batch_size, DlqLimit(max_consecutive=3))
    with pytest.raises(DlqLimitExceeded, match="4 events in a row") as info:
        loop.run(until_idle=2.0)
    loop.source.close()
    assert isinstance(info.value.__cause__, ValueError)
    assert committed_total(settings) == 0
    assert read_topic(settings.kafka, settings.topics.dlq, 1, timeout=2) == []


def test_a_failure_ratio_over_the_window_halts_the_loop(settings: Settings) -> None:
    followers = [name for i in range(6) for name in (f"ok{i}", f"poison{i}")]
    publish(settings, followers)
    limit = DlqLimit(max_consecutive=None, max_ratio=0.25, window=8)
    loop = loop_for(settings, Recording(), batch_size=1, limit=limit)
    with pytest.raises(DlqLimitExceeded, match="of the last 8 events"):
        loop.run(until_idle=2.0)
    loop.source.close()
    # Batches of one: ok0 p0 ok1 p1 ok2 p2; p2 is the third failure among the last 8 (> 0.25 x 8)
    # and halts the loop; p0 and p1 were dead-lettered and committed once ok1 and ok2 applied.
    assert committed_total(settings) == 5
    assert len(read_topic(settings.kafka, settings.topics.dlq, 3, timeout=5)) == 2


class CacheDown(Recording):
    """memcached does not answer for ``outage`` seconds from the first call (None: ever)."""

    def __init__(self, outage: float | None = None) -> None:
        super().__init__()
        self.outage = outage
        self.until: float | None = None

    def apply(self, batch: Sequence[Positioned], pulse: Pulse = no_pulse) -> None:
        if self.until is None and self.outage is not None:
            self.until = time.monotonic() + self.outage
        if self.until is None or time.monotonic() < self.until:
            raise CacheUnavailable("memcached 127.0.0.1:1: connection refused")
        super().apply(batch, pulse)


def test_a_stop_during_a_failing_batch_exits_cleanly_without_committing(
    settings: Settings,
) -> None:
    publish(settings, ["a", "b"])
    loop = loop_for(settings, CacheDown())
    when(lambda: loop.stats.retries >= 2, loop.stop.set)  # a SIGTERM while retrying
    stats = loop.run()  # returns: a supervisor's stop is not a crash
    loop.source.close()
    assert stats.retries >= 1 and stats.applied == 0
    assert committed_total(settings) == 0


def test_retrying_longer_than_max_poll_interval_keeps_the_member_in_the_group(
    settings: Settings,
) -> None:
    """Paused and polled while retrying: never put out of the group, nothing revoked."""
    publish(settings, ["a", "b", "c"])
    applier = CacheDown(outage=9.0)  # longer than max.poll.interval.ms
    loop = loop_for(settings, applier, max_poll_interval_ms=6000)
    stats = loop.run(until_idle=2.0)
    changes = dict(loop.source.changes)  # before close(), which revokes
    loop.source.close()
    assert sorted(applier.applied) == ["a", "b", "c"]
    assert stats.retries >= 5 and stats.abandoned == 0
    assert changes == {"assigned": 1}
    assert committed_total(settings) == 3


class LongBatch(Recording):
    """A batch whose apply takes ``seconds`` of successful work in short steps (a fan-out of
    millions of deliveries), pulsing between the steps as the real appliers do."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def apply(self, batch: Sequence[Positioned], pulse: Pulse) -> None:
        done = time.monotonic() + self.seconds
        while time.monotonic() < done:
            time.sleep(0.2)  # one wave of work
            pulse()
        super().apply(batch, pulse)


def test_one_apply_longer_than_max_poll_interval_keeps_the_member_in_the_group(
    settings: Settings,
) -> None:
    """Without pulses the member is put out of its group mid-batch, its commit is refused and
    the same long batch comes back forever."""
    publish(settings, ["a", "b", "c"])
    applier = LongBatch(seconds=9.0)  # longer than max.poll.interval.ms
    loop = loop_for(settings, applier, max_poll_interval_ms=6000)
    when(lambda: sum(loop.source.changes.values()) > 1, loop.stop.set)  # fail, don't livelock
    stats = loop.run(until_idle=2.0)
    changes = dict(loop.source.changes)
    loop.source.close()
    assert sorted(applier.applied) == ["a", "b", "c"]
    assert stats.abandoned == 0
    assert changes == {"assigned": 1}
    assert committed_total(settings) == 3


class SlowFirstBatch(Recording):
    """The first batch takes ``seconds`` in one wave, without a pulse (a store call that slow)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.calls = 0

    def apply(self, batch: Sequence[Positioned], pulse: Pulse = no_pulse) -> None:
        self.calls += 1
        if self.calls == 1:
            time.sleep(self.seconds)  # the slow store under test, not a synchronisation
        super().apply(batch, pulse)


def test_until_idle_does_not_count_a_slow_batch_or_the_kick_it_caused_as_idleness(
    settings: Settings,
) -> None:
    """A batch slower than both the idle bound and max.poll.interval.ms: the member is put out
    of its group, polls find nothing while it rejoins, and the run must still go on to consume
    everything rather than take the time spent on the batch for idleness."""
    publish(settings, ["a", "b", "c"])
    applier = SlowFirstBatch(seconds=7.0)  # > max.poll.interval.ms and > until_idle
    loop = loop_for(settings, applier, batch_size=1, max_poll_interval_ms=6000)
    loop.run(until_idle=2.0)
    loop.source.close()
    assert set(applier.applied) == {"a", "b", "c"}
    assert committed_total(settings) == 3


def test_a_revocation_while_retrying_abandons_the_batch_to_the_new_owner(
    settings: Settings,
) -> None:
    publish(settings, ["a", "b"])
    applier = CacheDown()
    loop = loop_for(settings, applier)
    other = Consumer(
        {
            "bootstrap.servers": settings.kafka,
            "group.id": f"{settings.group}.loop",
            "enable.auto.commit": False,
            "partition.assignment.strategy": "roundrobin",
        }
    )

    def join_the_group() -> None:  # a second member joins: the group rebalances
        while loop.stats.retries < 1 and not loop.stop.is_set():
            time.sleep(0.05)
        other.subscribe([settings.topics.graph])
        while not loop.stop.is_set():
            other.poll(0.2)

    member = threading.Thread(target=join_the_group)
    member.start()
    when(lambda: loop.stats.abandoned >= 1, loop.stop.set)
    stats = loop.run()
    loop.stop.set()
    member.join()
    loop.source.close()
    other.close()
    assert stats.abandoned >= 1 and stats.applied == 0
    assert loop.source.changes["revoked"] >= 1
    assert committed_total(settings) == 0


class SlowOnce(Recording):
    """The first batch takes longer than max.poll.interval.ms (the fault under test)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.batches = 0

    def apply(self, batch: Sequence[Positioned], pulse: Pulse = no_pulse) -> None:
        self.batches += 1
        if self.batches == 1:
            time.sleep(self.seconds)
        super().apply(batch, pulse)


def test_a_commit_refused_after_a_rebalance_is_dropped_and_the_batch_redelivered(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="fanout.consumer")
    publish(settings, ["a", "b", "c"])
    applier = SlowOnce(seconds=8.0)
    loop = loop_for(settings, applier, max_poll_interval_ms=6000)
    stats = loop.run(until_idle=2.0)
    kicked = loop.source.changes["kicked"]
    loop.source.close()
    assert stats.commits_rejected == 1
    assert kicked == 1
    # What the broker answers a member it has put out of the group (test_failure_policy).
    assert "UNKNOWN_MEMBER_ID" in caplog.text
    assert sorted(applier.applied) == ["a", "a", "b", "b", "c", "c"]  # at least once
    assert committed_total(settings) == 3
