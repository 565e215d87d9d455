"""The commit policy of the consume loop, with stand-in appliers on the real broker."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest
from confluent_kafka import Consumer, TopicPartition

from consumers import ConsumeLoop, DeadLetters, KafkaSource, Positioned
from fanout.settings import Settings
from graph import CacheUnavailable
from producers import EventPublisher
from schemas import Follow
from tests.kafka_helpers import read_topic


class Recording:
    """Applies everything except events from the follower named ``poison``."""

    accepted: tuple[type, ...] = (Follow,)

    def __init__(self, always_fail: bool = False) -> None:
        self.applied: list[str] = []
        self.always_fail = always_fail

    def apply(self, batch: Sequence[Positioned]) -> None:
        for item in batch:
            assert isinstance(item.event, Follow)
            if self.always_fail or item.event.follower == "poison":
                raise ValueError(f"cannot apply {item.event.follower}")
        self.applied += [item.event.follower for item in batch]  # type: ignore[union-attr]


def loop_for(settings: Settings, applier: Recording) -> ConsumeLoop:
    group = f"{settings.group}.loop"
    return ConsumeLoop(
        KafkaSource(settings.kafka, group, [settings.topics.graph]),
        applier,
        DeadLetters(settings.kafka, settings.topics.dlq, group),
        threading.Event(),
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


def test_a_poison_event_is_isolated_and_dead_lettered(settings: Settings) -> None:
    publish(settings, ["a", "b", "poison", "c", "d"])  # one partition: key is the followee
    applier = Recording()
    loop = loop_for(settings, applier)
    stats = loop.run(until_idle=2.0)
    loop.source.close()
    assert sorted(applier.applied) == ["a", "b", "c", "d"]
    assert stats.dead_lettered == 1
    (dead,) = read_topic(settings.kafka, settings.topics.dlq, 1)
    assert b"ValueError: cannot apply poison" in dict(dead.headers())["fanout.dlq.reason"]
    assert committed_total(settings) == 5


def test_when_every_event_fails_the_loop_stops_without_committing(settings: Settings) -> None:
    publish(settings, ["a", "b", "c"])
    loop = loop_for(settings, Recording(always_fail=True))
    with pytest.raises(ValueError):
        loop.run(until_idle=2.0)
    loop.source.close()
    assert committed_total(settings) == 0
    assert read_topic(settings.kafka, settings.topics.dlq, 1, timeout=2) == []


class CacheDown(Recording):
    def apply(self, batch: Sequence[Positioned]) -> None:
        raise CacheUnavailable("memcached 127.0.0.1:1: connection refused")


def test_a_stop_during_a_failing_batch_exits_cleanly_without_committing(
    settings: Settings,
) -> None:
    publish(settings, ["a", "b"])
    loop = loop_for(settings, CacheDown())

    def terminate_while_retrying() -> None:  # a SIGTERM while the batch is being retried
        deadline = time.monotonic() + 60
        while loop.stats.retries < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        loop.stop.set()

    threading.Thread(target=terminate_while_retrying, daemon=True).start()
    stats = loop.run()  # returns: a supervisor's stop is not a crash
    loop.source.close()
    assert stats.retries >= 1 and stats.applied == 0
    assert committed_total(settings) == 0
