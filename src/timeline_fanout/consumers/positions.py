"""Decoding Kafka messages into positioned events, or into the reason they are rejected.

An event's position orders the writes to one edge: event time first (milliseconds, stamped by the
publisher), the partition offset as the tie-breaker within a millisecond. Both come from the log,
so a replay computes the same positions and the edge store's "newer wins" rule makes it a no-op.
``ts`` is below 2**43 (the schema's bound), so the position fits a signed 64-bit integer.

The message key must be the event's partition key (``schemas.partition_key``: the followee of a
follow, the author of a post, ...). Ordering per list holds only if every event for that list
shares a partition, so an event keyed otherwise (or not keyed) is dead-lettered, never applied:
applied, a wrong-keyed unfollow could overtake the follow it undoes.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Message

from timeline_fanout.schemas import AnyEvent, EventDecodeError, decode_event, partition_key
from timeline_fanout.schemas.events import KEY_FIELDS

OFFSET_BITS = 20


@dataclass(frozen=True, slots=True)
class Origin:
    topic: str
    partition: int
    offset: int
    key: bytes | None

    @classmethod
    def of(cls, msg: Message) -> Origin:
        """Where a consumed message came from. The client's types allow None for each, which
        only error events have; the source never hands those over (consumers/kafka_source.py)."""
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        assert topic is not None and partition is not None and offset is not None, msg.error()
        return cls(topic, partition, offset, msg.key())


@dataclass(frozen=True, slots=True)
class Positioned:
    event: AnyEvent
    pos: int
    origin: Origin
    raw: bytes


@dataclass(frozen=True, slots=True)
class Rejected:
    reason: str
    origin: Origin
    value: bytes | None


def position(ts_ms: int, offset: int) -> int:
    return (ts_ms << OFFSET_BITS) | (offset & ((1 << OFFSET_BITS) - 1))


def decode_message(msg: Message, accepted: tuple[type, ...]) -> Positioned | Rejected:
    """``accepted``: the event classes this consumer takes."""
    origin = Origin.of(msg)
    value: bytes | None = msg.value()
    try:
        event = decode_event(value)
    except EventDecodeError as exc:
        return Rejected(str(exc), origin, value)
    if not isinstance(event, accepted):
        return Rejected(f"type: {event.type} events do not belong on {origin.topic}", origin, value)
    expected = partition_key(event).encode()
    if origin.key != expected:
        got = "missing" if origin.key is None else repr(origin.key.decode("utf-8", "replace"))
        field = "/".join(KEY_FIELDS[event.type])
        reason = f"key: {got}; must be the event's {field} {expected.decode()!r}"
        return Rejected(reason, origin, value)
    ts = event.ts
    if ts is None:  # published without the envelope: the broker's timestamp stands in
        _kind, broker_ts = msg.timestamp()
        ts = max(broker_ts, 0)
    return Positioned(event, position(ts, origin.offset), origin, value or b"")
