"""Where a replay starts: the beginning, saved offsets, or a point in time.

``--from-time`` asks the broker (ListOffsets by timestamp) and then checks the answer against
the messages themselves: the offset found must hold the first message at or after the time. The
answer -1 means "no message at or after it" and is checked as the partition's end. A broker that
answers wrongly (the dev broker, Tansu, may answer 0) is caught by that check and the offset is
found by scanning the partition instead.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from timeline_fanout.kafka_log import logged

READ_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class FromBeginning:
    pass


@dataclass(frozen=True, slots=True)
class FromOffsets:
    offsets: Mapping[int, int]  # partition -> first offset to replay


@dataclass(frozen=True, slots=True)
class FromTime:
    ms: int


ReplayStart = FromBeginning | FromOffsets | FromTime


@dataclass(frozen=True, slots=True)
class PartitionStart:
    partition: int
    offset: int
    end: int  # high watermark when the replay started (for progress)
    scanned: bool = False  # the broker's time lookup was wrong and a scan found the offset


class _Probe:
    """A group-less consumer that reads single messages at given offsets."""

    def __init__(self, bootstrap: str, topic: str, extra: Mapping[str, Any] | None) -> None:
        self.topic = topic
        self.consumer = Consumer(
            logged(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": f"fanout-probe-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                    # The end of a partition is reported, not waited out for READ_TIMEOUT_S.
                    "enable.partition.eof": True,
                    **(extra or {}),
                }
            )
        )

    def partitions(self) -> list[int]:
        meta = self.consumer.list_topics(self.topic, timeout=10).topics[self.topic]
        return sorted(meta.partitions)

    def bounds(self, partition: int) -> tuple[int, int]:
        """(first kept offset, high watermark): retention or deleted records move the first."""
        low, high = self.consumer.get_watermark_offsets(
            TopicPartition(self.topic, partition), timeout=10
        )
        return int(low), int(high)

    def timestamp_at(self, partition: int, offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first message at or after ``offset``; None at the end."""
        self.consumer.assign([TopicPartition(self.topic, partition, offset)])
        msg = self._next()
        return None if msg is None else (int(msg.offset() or 0), msg.timestamp()[1])

    def scan(self, partition: int, start: int, ts_ms: int) -> int:
        self.consumer.assign([TopicPartition(self.topic, partition, start)])
        last = start
        while (msg := self._next()) is not None:
            last = int(msg.offset() or 0) + 1
            if msg.timestamp()[1] >= ts_ms:
                return int(msg.offset() or 0)
        return last

    def _next(self) -> Message | None:
        """The next message, or None at the end of the partition (or after READ_TIMEOUT_S)."""
        deadline = time.monotonic() + READ_TIMEOUT_S
        while (left := deadline - time.monotonic()) > 0:
            for msg in self.consumer.consume(1, left):
                error = msg.error()
                if error is None:
                    return msg
                if error.code() == KafkaError._PARTITION_EOF:
                    return None
        return None

    def by_time(self, partitions: list[int], ts_ms: int) -> dict[int, int]:
        asked = [TopicPartition(self.topic, p, ts_ms) for p in partitions]
        return {
            tp.partition: tp.offset for tp in self.consumer.offsets_for_times(asked, timeout=10)
        }

    def close(self) -> None:
        self.consumer.close()


def _verified(probe: _Probe, partition: int, candidate: int, ts_ms: int, low: int) -> bool:
    """Whether ``candidate`` is the first kept message at or after ``ts_ms``: it is not
    earlier, and the message before it (when one is kept) is."""
    found = probe.timestamp_at(partition, candidate)
    if found is not None and found[1] < ts_ms:
        return False
    if candidate <= low:
        return True
    before = probe.timestamp_at(partition, candidate - 1)
    return before is not None and before[1] < ts_ms


def resolve(
    bootstrap: str, topic: str, start: ReplayStart, extra: Mapping[str, Any] | None = None
) -> list[PartitionStart]:
    probe = _Probe(bootstrap, topic, extra)
    try:
        partitions = probe.partitions()
        bounds = {p: probe.bounds(p) for p in partitions}
        ends = {p: high for p, (_, high) in bounds.items()}
        if isinstance(start, FromBeginning):
            return [PartitionStart(p, 0, ends[p]) for p in partitions]
        if isinstance(start, FromOffsets):
            return [PartitionStart(p, start.offsets.get(p, 0), ends[p]) for p in partitions]
        answers = probe.by_time(partitions, start.ms)
        result = []
        for p in partitions:
            candidate = answers.get(p, -1)
            if candidate < 0:  # nothing at or after the time: the end, if the messages agree
                candidate = ends[p]
            low = bounds[p][0]
            if _verified(probe, p, candidate, start.ms, low):
                result.append(PartitionStart(p, candidate, ends[p]))
            else:
                result.append(PartitionStart(p, probe.scan(p, low, start.ms), ends[p], True))
        return result
    finally:
        probe.close()
