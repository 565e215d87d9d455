"""``EventPublisher`` partitions as Kafka's Java client does, so producers in any language agree.

The reference below is Kafka's ``Utils.murmur2`` (seed 0x9747b28c), checked against the vectors
of Kafka's own ``UtilsTest.testMurmur2``; a key's partition is ``(murmur2(key) & 0x7fffffff) %
partitions`` (``Utils.toPositive``, as the Java ``BuiltInPartitioner`` and kafkajs's default
partitioner compute it). The real producer must put every key where the reference says.
"""

from __future__ import annotations

import pytest

from tests.kafka_helpers import read_topic
from timeline_fanout.cli.settings import Settings
from timeline_fanout.producers import EventPublisher

M = 0x5BD1E995
MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 as a signed 32-bit Java int."""
    length = len(data)
    h = (0x9747B28C ^ length) & MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * M) & MASK
        k ^= k >> 24
        k = (k * M) & MASK
        h = ((h * M) & MASK) ^ k
    tail = data[whole:]
    if len(tail) >= 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * M) & MASK
    h ^= h >> 13
    h = (h * M) & MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def java_partition(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


# org.apache.kafka.common.utils.UtilsTest#testMurmur2
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), KAFKA_VECTORS.items())
def test_reference_murmur2_matches_kafka_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_reference_partitions_for_a_few_keys() -> None:
    """Pinned, so a change of the reference itself shows: the partitions of 6 the Java client
    picks for these keys."""
    keys = [b"21", b"foobar", b"abc", b"u1", b"lead", b"-lead"]
    assert [java_partition(k, 6) for k in keys] == [0, 0, 3, 4, 5, 4]


def test_the_publisher_puts_each_key_where_java_would(settings: Settings) -> None:
    """The topics of a test have 6 partitions; 40 keys spread over all of them."""
    users = [k.decode() for k in KAFKA_VECTORS] + [f"u{i}" for i in range(34)]
    with EventPublisher(settings.kafka, settings.topics) as publisher:
        for user in users:
            publisher.publish({"type": "user_removed", "user": user})
    landed = {m.key(): m.partition() for m in read_topic(settings.kafka, settings.topics.graph, 40)}
    assert len(landed) == 40
    assert landed == {u.encode(): java_partition(u.encode(), 6) for u in users}
    assert len(set(landed.values())) == 6
