"""EventPublisher against the real Tansu broker of the local stack."""

from __future__ import annotations

from collections import defaultdict

import orjson
import pytest

from tests.conftest import Refused
from tests.kafka_helpers import read_topic
from timeline_fanout.cli.settings import Settings
from timeline_fanout.producers import (
    AdmitTypes,
    EventPublisher,
    InternalPublisher,
    PublishError,
    create_topics,
)
from timeline_fanout.schemas import EventDecodeError, PostDeleted, Topics, decode_event
from timeline_fanout.schemas.topics import GRAPH_TYPES


def test_published_events_read_back_with_envelope_and_keys(settings: Settings) -> None:
    with EventPublisher(settings.kafka, settings.topics) as publisher:
        sent = [
            publisher.publish({"type": "follow", "follower": f"u{i}", "followee": f"star{i % 3}"})
            for i in range(30)
        ]
        post = publisher.publish({"type": "post", "author": "star0", "post_id": "p1"})
    graph = read_topic(settings.kafka, settings.topics.graph, 30)
    assert len(graph) == 30
    decoded = [decode_event(m.value()) for m in graph]
    assert {e.event_id for e in decoded} == {e.event_id for e in sent}
    assert all(e.v == 1 and e.ts and e.ts > 1_600_000_000_000 for e in decoded)
    for message, event in zip(graph, decoded, strict=True):
        assert message.key() == event.followee.encode()  # type: ignore[union-attr]
    posts = read_topic(settings.kafka, settings.topics.posts, 1)
    assert orjson.loads(posts[0].value())["event_id"] == post.event_id
    assert posts[0].key() == b"star0"


def test_a_deletion_follows_its_post_on_the_posts_topic_under_the_authors_key(
    settings: Settings,
) -> None:
    """Keyed by author as the post is, the deletion lands on the post's partition, after it."""
    with EventPublisher(settings.kafka, settings.topics) as publisher:
        post = publisher.publish({"type": "post", "author": "star0", "post_id": "p1"})
        gone = publisher.publish({"type": "post_deleted", "author": "star0", "post_id": "p1"})
    messages = read_topic(settings.kafka, settings.topics.posts, 2)
    assert [m.key() for m in messages] == [b"star0", b"star0"]
    assert len({m.partition() for m in messages}) == 1
    decoded = [decode_event(m.value()) for m in messages]
    assert [(e.type, e.event_id) for e in decoded] == [
        ("post", post.event_id),
        ("post_deleted", gone.event_id),
    ]
    assert isinstance(decoded[1], PostDeleted) and decoded[1].post_id == "p1"
    assert read_topic(settings.kafka, settings.topics.graph, 1, timeout=2) == []


def test_all_events_of_one_followee_land_in_one_partition(settings: Settings) -> None:
    with EventPublisher(settings.kafka, settings.topics) as publisher:
        for i in range(120):
            kind = "follow" if i % 3 else "unfollow"
            publisher.publish({"type": kind, "follower": f"f{i}", "followee": f"e{i % 8}"})
    partitions: dict[str, set[int]] = defaultdict(set)
    for message in read_topic(settings.kafka, settings.topics.graph, 120):
        partitions[message.key().decode()].add(message.partition())
    assert len(partitions) == 8
    assert all(len(p) == 1 for p in partitions.values())
    assert len(set().union(*partitions.values())) > 1  # keys really spread over partitions


def test_invalid_event_is_an_exception_before_anything_is_sent(settings: Settings) -> None:
    publisher = EventPublisher(settings.kafka, settings.topics)
    with pytest.raises(EventDecodeError) as info:
        publisher.publish({"type": "follow", "follower": "a b", "followee": "c"})
    assert info.value.field == "follower"
    assert publisher.flush().delivered == 0


def test_a_failed_delivery_is_reported_not_silent(refused: Refused) -> None:
    unreachable = str(refused)
    publisher = EventPublisher(unreachable, Topics("nowhere"), {"message.timeout.ms": 1500})
    publisher.publish({"type": "follow", "follower": "a", "followee": "b"}, tag="line-1")
    report = publisher.flush(timeout=10)
    assert not report.ok
    assert [f.tag for f in report.failed] == ["line-1"]
    with pytest.raises(PublishError):  # noqa: SIM117
        with EventPublisher(unreachable, Topics("x"), {"message.timeout.ms": 1500}) as p:
            p.publish({"type": "user_removed", "user": "a"})


def test_create_topics_is_idempotent(settings: Settings) -> None:
    names = [f"{settings.topic_prefix}.extra"]
    assert create_topics(settings.kafka, names, 3) == {names[0]: "created"}
    assert create_topics(settings.kafka, names, 3) == {names[0]: "exists"}


FORGED_TASK = {
    "type": "fanout_task",
    "author": "u1",
    "post_id": "p1",
    "post_ts": 1_700_000_000_000,
    "chunk": 0,
    "followers": ["victim"],
}


def test_apps_cannot_publish_internal_fanout_tasks(settings: Settings) -> None:
    publisher = EventPublisher(settings.kafka, settings.topics)
    with pytest.raises(EventDecodeError, match="fanout_task events are internal") as info:
        publisher.publish(FORGED_TASK)
    assert info.value.field == "type"
    assert publisher.flush().delivered == 0


def test_the_internal_publisher_sends_tasks_and_nothing_else(settings: Settings) -> None:
    with InternalPublisher(settings.kafka, settings.topics) as tasks:
        with pytest.raises(EventDecodeError, match="post events are not published by"):
            tasks.publish({"type": "post", "author": "u1", "post_id": "p1"})
        tasks.publish(FORGED_TASK)
    (message,) = read_topic(settings.kafka, settings.topics.fanout_tasks, 1)
    assert decode_event(message.value()).type == "fanout_task"


def test_a_publisher_admits_only_the_types_its_policy_names(settings: Settings) -> None:
    graph_only = AdmitTypes(GRAPH_TYPES, "graph writers")
    with EventPublisher(settings.kafka, settings.topics, admission=graph_only) as publisher:
        with pytest.raises(EventDecodeError, match="post events are not published by graph"):
            publisher.publish({"type": "post", "author": "u1", "post_id": "p1"})
        publisher.publish({"type": "follow", "follower": "u2", "followee": "u1"})
    (message,) = read_topic(settings.kafka, settings.topics.graph, 1)
    assert decode_event(message.value()).type == "follow"


def test_check_brokers_answers_from_a_live_broker_and_raises_without_one(
    settings: Settings, refused: Refused
) -> None:
    from confluent_kafka import KafkaException

    assert EventPublisher(settings.kafka, settings.topics).check_brokers(5.0) >= 1
    dead = EventPublisher(str(refused), settings.topics)
    with pytest.raises(KafkaException):
        dead.check_brokers(0.5)
