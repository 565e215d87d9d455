"""Reading topics back in tests, without a consumer group (no group join to wait for)."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition


def read_topic(bootstrap: str, topic: str, expected: int, timeout: float = 20.0) -> list[Any]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    metadata = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, 0) for p in metadata.partitions])
    messages: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(messages) < expected and time.monotonic() < deadline:
        messages += [m for m in consumer.consume(500, 0.5) if m.error() is None]
    consumer.close()
    return messages


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    """Per partition, the offset the next message will get (the log end, on Apache Kafka)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in metadata.partitions
        }
    finally:
        consumer.close()
