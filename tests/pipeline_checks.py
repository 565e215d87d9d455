"""Driving a running pipeline from the host, whatever runs it (a compose stack, containers
started by testcontainers): publish a follower graph and posts, wait for a consumer group to
commit, and check every timeline."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.kafka_helpers import high_watermarks
from timeline_fanout.cli import wiring
from timeline_fanout.cli.settings import Settings
from timeline_fanout.producers import EventPublisher

T = TypeVar("T")


def until(condition: Callable[[], T | None], seconds: float, what: str, poll: float = 0.5) -> T:
    """Poll ``condition`` every ``poll`` seconds until it returns a value other than None (or
    False)."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds:.0f} s: {what}")
        time.sleep(poll)


def publish_graph(settings: Settings, prefix: str, users: int, authors: int) -> dict[str, set[str]]:
    """Every user follows a seeded random subset of the authors; returns who follows whom."""
    rng = random.Random(prefix)
    follows = {
        f"{prefix}u{i}": {f"{prefix}a{j}" for j in range(authors) if rng.random() < 0.5}
        for i in range(users)
    }
    with EventPublisher(settings.kafka, settings.topics) as publisher:
        for user, followees in follows.items():
            for author in sorted(followees):
                publisher.publish({"type": "follow", "follower": user, "followee": author})
    return follows


def publish_posts(settings: Settings, authors: list[str], count: int, tag: str) -> dict[str, str]:
    """``count`` posts by the authors in turn; returns post id -> author."""
    posts = {f"{tag}-{n}": authors[n % len(authors)] for n in range(count)}
    with EventPublisher(settings.kafka, settings.topics) as publisher:
        for post_id, author in posts.items():
            publisher.publish({"type": "post", "author": author, "post_id": post_id})
    return posts


def committed_lag(settings: Settings, consumer: str, topic: str) -> int:
    """Messages of ``topic`` that ``fanout consume CONSUMER``'s group has not committed yet."""
    group = wiring.group_id(settings, consumer)
    admin = AdminClient({"bootstrap.servers": settings.kafka})
    ends = high_watermarks(settings.kafka, topic)
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in ends])]
    answer = admin.list_consumer_group_offsets(request)[group].result()
    committed = {tp.partition: max(tp.offset, 0) for tp in answer.topic_partitions}
    return sum(end - committed.get(p, 0) for p, end in ends.items())


def await_graph_applied(settings: Settings, seconds: float = 120) -> None:
    until(
        lambda: committed_lag(settings, "graph", settings.topics.graph) == 0,
        seconds,
        "graph applied",
    )


def timelines_match(
    settings: Settings, follows: dict[str, set[str]], posts: dict[str, str]
) -> bool:
    """Every user's timeline holds exactly the posts (id -> author) of those it follows."""
    reader = wiring.timeline_reader(settings, wiring.edge_store(settings))
    for user, followees in follows.items():
        want = {p for p, author in posts.items() if author in followees}
        got = {e.post_id for e in reader.read(user, limit=1000)}
        if got != want:
            return False
    return True
