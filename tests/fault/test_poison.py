"""Poison input mixed into a valid stream: every bad message goes to the dead-letter topic with
its reason and origin, every valid event around it is applied, the consumer never stops."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
from confluent_kafka import KafkaError, Message, Producer

from tests.conftest import run_cli
from tests.fault.harness import Model, compare, record
from tests.kafka_helpers import read_topic
from timeline_fanout.cli.settings import Settings


def follow(follower: object, followee: object = "u1") -> bytes:
    return orjson.dumps({"type": "follow", "follower": follower, "followee": followee})


POISON: dict[str, list[bytes]] = {
    "invalid_json": [b"{not json", b'{"type": "follow",'],
    "non_utf8": [b"\xff\xfe\xfd", b'{"type":"follow","follower":"\xc3\x28","followee":"u1"}'],
    "unknown_type": [b'{"type":"like","user":"u1"}', b'{"type":"FOLLOW","follower":"a"}'],
    "missing_field": [b'{"type":"follow","follower":"u1"}', b'{"type":"user_removed"}'],
    "id_with_delimiter": [follow("a +b"), follow("a-b", "x+y")],
    "id_with_space": [follow("a b"), follow(" u2")],
    "id_with_crlf": [follow("a\r\nb"), follow("u2\n")],
    "id_with_control": [follow("a\x01b"), follow("u\x1f")],
    "id_300_chars": [follow("x" * 300), follow("u2", "y" * 300)],
    "number_5000_digits": [
        b'{"type":"follow","follower":"u2","followee":"u1","ts":' + b"9" * 5000 + b"}",
        b'{"type":"follow","follower":' + b"1" * 5000 + b',"followee":"u1"}',
    ],
    "oversized_text": [
        orjson.dumps({"type": "post", "author": "u1", "post_id": "p", "text": "t" * 5000}),
        orjson.dumps({"type": "post", "author": "u1", "post_id": "q", "text": "t" * 100_000}),
    ],
    "message_2mb": [b'{"type":"follow","follower":"' + b"z" * (2 * 1024 * 1024) + b'"}'],
    "nested_100k": [b"[" * 100_000, b'{"a":' * 100_000],
}
POSTS = {"oversized_text"}  # these go to the posts topic, the rest to the graph topic


def test_poison_goes_to_the_dead_letter_topic_and_valid_events_are_applied(
    settings: Settings, fault_report: dict[str, Any]
) -> None:
    producer = Producer({"bootstrap.servers": settings.kafka, "message.max.bytes": 3_000_000})
    refused: list[str] = []
    model = Model(cap=settings.timeline_max)
    sent: Counter[str] = Counter()
    n = 0

    def report(category: str) -> Any:
        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:  # the broker's own limit: a clear error on the producer side
                refused.append(category)

        return on_delivery

    for category, payloads in POISON.items():
        topic = settings.topics.posts if category in POSTS else settings.topics.graph
        for payload in payloads:
            producer.produce(topic, key=b"u1", value=payload, on_delivery=report(category))
            sent[category] += 1
            n += 1
            producer.produce(settings.topics.graph, key=b"u1", value=follow(f"ok{n}"))
            model.edges[(f"ok{n}", "u1")] = True
    producer.flush(30)
    model.users.update({"u1", *(a for a, _ in model.edges)})
    expected_dlq = sum(sent.values()) - len(refused)

    for which in ("graph", "fanout"):
        done = run_cli(settings, "consume", which, "--until-idle", "3")
        assert done.returncode == 0, done.stderr.decode()  # never stopped, never crashed

    dead = read_topic(settings.kafka, settings.topics.dlq, expected_dlq)
    reasons = Counter()
    for message in dead:
        headers = dict(message.headers())
        assert headers["fanout.dlq.reason"]
        assert headers["fanout.dlq.topic"].decode() in (
            settings.topics.graph,
            settings.topics.posts,
        )
        assert int(headers["fanout.dlq.partition"]) >= 0 and int(headers["fanout.dlq.offset"]) >= 0
        reasons[headers["fanout.dlq.reason"].decode().split(":")[0]] += 1
    found = compare(settings, model)
    per_category = {f"dlq_{c}": sent[c] - refused.count(c) for c in POISON}
    record(
        fault_report,
        {
            "dlq": len(dead),
            "dlq_expected": expected_dlq,
            "refused_by_broker": len(refused),
            **per_category,
            **found,
        },
    )
    assert len(dead) == expected_dlq
    assert sum(found.values()) == 0, dict(found)
