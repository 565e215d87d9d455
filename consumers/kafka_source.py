"""A Kafka consumer that hands out batches and commits exactly what it is told to.

Auto-commit is off: the loop commits a batch's offsets only after its effects are durable
(at-least-once). Idle time counts from the last message or the last change of assignment, and
never before a session timeout has passed since the consumer started: a consumer restarted after
a crash first gets nothing while its dead predecessor still holds the partitions, and "nothing
arrived" means nothing until that predecessor's session has expired and the group rebalanced.

A replay passes an explicit ``assignment`` instead: the partitions and start offsets are given,
nothing is negotiated with the group, and commits go to the replay's own group only.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

log = logging.getLogger("fanout.consumer")


class KafkaSource:
    def __init__(
        self,
        bootstrap: str,
        group: str,
        topics: Sequence[str],
        *,
        max_poll_interval_ms: int = 10000,
        extra: Mapping[str, Any] | None = None,
        assignment: Sequence[TopicPartition] | None = None,
        instance_id: str | None = None,
    ) -> None:
        session_timeout_ms = min(45000, max(6000, max_poll_interval_ms))
        self._settle_s = session_timeout_ms / 1000 + 2
        self._started = time.monotonic()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                # A broker that holds fetches for the full wait (the dev broker does) would add
                # this much to every hop of a post (post, then its chunk tasks).
                "fetch.wait.max.ms": 50,
                "max.poll.interval.ms": max_poll_interval_ms,
                "session.timeout.ms": session_timeout_ms,
                # Eager: every rebalance revokes everything, then assigns the new set (possibly
                # empty), so "between a revoke and the next assign" is a rebalance in progress.
                "partition.assignment.strategy": "roundrobin",
                # Static membership: a restarted process takes over its predecessor's place
                # at once instead of waiting for the dead member's session to expire.
                **({"group.instance.id": instance_id} if instance_id else {}),
                **(extra or {}),
            }
        )
        self.assigned_at: float | None = None  # first assignment (joined the group)
        self.last_message_at: float | None = None
        self._last_change: float | None = None
        self._rebalancing = False
        self._early: list[Message] = []
        if assignment is None:
            self._consumer.subscribe(
                list(topics),
                on_assign=functools.partial(self._on_change, "assigned"),
                on_revoke=functools.partial(self._on_change, "revoked"),
                on_lost=functools.partial(self._on_change, "lost"),
            )
        else:
            self._consumer.assign(list(assignment))
            self.assigned_at = self._last_change = time.monotonic()
            self._settle_s = 0.0

    def _on_change(self, what: str, _consumer: Any, partitions: list[TopicPartition]) -> None:
        log.info("partitions %s: %s", what, sorted((p.topic, p.partition) for p in partitions))
        self._rebalancing = what != "assigned"
        now = time.monotonic()
        if self.assigned_at is None:
            self.assigned_at = now
        self._last_change = now

    def await_assignment(self, timeout: float = 60.0) -> bool:
        """Join the group before anything is published (so latency figures exclude the join).
        Messages that arrive meanwhile are kept for the next ``poll_batch``."""
        deadline = time.monotonic() + timeout
        while self.assigned_at is None and time.monotonic() < deadline:
            self._early += self.poll_batch(100, 0.2)
        return self.assigned_at is not None

    def poll_batch(self, max_messages: int, timeout: float) -> list[Message]:
        if self._early:
            early, self._early = self._early, []
            return early
        # consume(n, timeout) waits for n messages or the whole timeout: wait for the first one
        # only, then take what is already fetched, so a lone message is not held back.
        first = self._consumer.poll(timeout)
        if first is None:
            return []
        messages = (
            [first, *self._consumer.consume(max_messages - 1, 0)] if max_messages > 1 else [first]
        )
        good = []
        for msg in messages:
            err = msg.error()
            if err is None:
                good.append(msg)
            elif err.code() != KafkaError._PARTITION_EOF and err.fatal():
                raise RuntimeError(f"fatal consumer error: {err}")
        if good:
            self.last_message_at = time.monotonic()
        return good

    def idle_for(self) -> float:
        """Seconds since the last message or assignment change; 0 until settled and while a
        rebalance is in progress."""
        if self.assigned_at is None or self._last_change is None or self._rebalancing:
            return 0.0
        now = time.monotonic()
        if now - self._started < self._settle_s:
            return 0.0
        return now - max(self.last_message_at or 0.0, self._last_change)

    def commit(self, messages: Sequence[Message]) -> None:
        """Commit the offset after the last message of each partition, synchronously."""
        highest: dict[tuple[str, int], int] = {}
        for msg in messages:
            topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
            assert topic is not None and partition is not None and offset is not None
            key = (topic, partition)
            highest[key] = max(highest.get(key, -1), offset)
        if highest:
            self._consumer.commit(
                offsets=[TopicPartition(t, p, o + 1) for (t, p), o in highest.items()],
                asynchronous=False,
            )

    def lag(self) -> dict[tuple[str, int], int]:
        """Messages behind the high watermark per assigned partition (from fetch metadata,
        no extra request); partitions with nothing fetched yet are left out."""
        result: dict[tuple[str, int], int] = {}
        for tp in self._consumer.position(self._consumer.assignment()):
            _low, high = self._consumer.get_watermark_offsets(tp, cached=True)
            if tp.offset >= 0 and high >= 0:
                result[(tp.topic, tp.partition)] = max(high - tp.offset, 0)
        return result

    def close(self) -> None:
        self._consumer.close()
