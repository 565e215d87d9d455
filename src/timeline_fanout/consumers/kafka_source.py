"""A Kafka consumer that hands out batches and commits exactly what it is told to.

Auto-commit is off: the loop commits a batch's offsets only after its effects are durable
(at-least-once). Idle time counts from the first poll that found nothing after a message (not
from the message: a batch that took longer than the idle bound to apply is work, not idleness)
or from the last change of assignment (a kick for a late poll is one), and never before a
session timeout has passed since the consumer started, unless this member was assigned every
partition of its topics: a consumer restarted after a crash may first get only part of them
while its dead predecessor still holds the rest, and "nothing arrived" means nothing until that
predecessor's session has expired and the group rebalanced. Holding every partition, there is
no predecessor to wait for, and the idle clock runs from the assignment.

A replay passes an explicit ``assignment`` instead: the partitions and start offsets are given,
nothing is negotiated with the group, and commits go to the replay's own group only.

While the loop retries a batch, it *pauses* the assignment and keeps polling (``keepalive``):
librdkafka returns nothing for paused partitions but counts the poll, so the member stays in the
group however long a dependency is down (``max.poll.interval.ms`` is a limit on the time between
polls, not on the time a batch takes). A rebalance can still happen meanwhile; partitions
assigned while paused are paused at once, and a revocation that touches the batch in hand is
remembered (``lost_in_hand``) so the loop abandons that batch to the partitions' new owner.

Group health is observable: ``unassigned_for()`` (seconds without an assignment, since startup
or the last revocation) and ``changes`` (assignments, revocations, losses, times this member
was put out of the group for not polling).
"""

from __future__ import annotations

import functools
import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from timeline_fanout.consumers.halts import PermanentFailure
from timeline_fanout.kafka_log import logged

log = logging.getLogger("fanout.consumer")

# A commit refused because the group has moved on: this member no longer owns the partitions
# (or not in this generation). Their new owner starts from the last commit, so the batch is
# consumed again there (at-least-once); retrying the commit could only fail again.
COMMIT_REBALANCED = {
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.STALE_MEMBER_EPOCH,
    KafkaError._ASSIGNMENT_LOST,
    # Not fatal: the commit of a static member replaced while it stopped (a restart that
    # rejoined under the same ``group.instance.id`` first). A duplicate that is still running
    # is fenced fatally, and that halts (``commit_failure``).
    KafkaError.FENCED_INSTANCE_ID,
}
# Worth retrying even when librdkafka does not flag the error retriable: the coordinator is
# moving, loading or not answering.
COMMIT_RETRY = {
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError._WAIT_COORD,
}

TopicPartitionKey = tuple[str, int]


class CommitRejected(Exception):
    """The group rebalanced under this batch: drop the commit, the new owner redoes the batch."""


class CommitRetriable(Exception):
    """The coordinator could not take the commit now; the same commit may succeed later."""


def commit_failure(err: KafkaError) -> Exception:
    """What a failed commit means: ``CommitRejected`` (drop it), ``CommitRetriable`` (retry it)
    or ``PermanentFailure`` (halt: fatal, e.g. FENCED_INSTANCE_ID when another process runs
    with our instance id, or not authorized)."""
    if err.fatal():
        return PermanentFailure(f"commit failed, fatal: {err}")
    if err.code() in COMMIT_REBALANCED:
        return CommitRejected(str(err))
    if err.retriable() or err.code() in COMMIT_RETRY:
        return CommitRetriable(str(err))
    return PermanentFailure(f"commit failed: {err}")


def _key(msg: Message) -> TopicPartitionKey:
    topic, partition = msg.topic(), msg.partition()
    assert topic is not None and partition is not None
    return (topic, partition)


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
        self.session_timeout_s = session_timeout_ms / 1000
        self.max_poll_interval_s = max_poll_interval_ms / 1000
        self._settle_s = session_timeout_ms / 1000 + 2
        self._started = time.monotonic()
        self._consumer = Consumer(
            logged(
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
        )
        self.assigned_at: float | None = None  # first assignment (joined the group)
        # When polls started finding nothing (None while messages keep arriving).
        self._empty_since: float | None = None
        self._last_change: float | None = None
        self._rebalancing = False
        self._early: list[Message] = []
        self.changes: Counter[str] = Counter()  # assigned, revoked, lost, kicked
        self.unassigned_since: float | None = self._started  # None while assigned
        self._paused = False
        self._polled_at = time.monotonic()
        self._in_hand: set[TopicPartitionKey] = set()
        self._lost_in_hand = False
        self._topics = list(topics)
        self._assigned: set[TopicPartitionKey] = set()
        self._owns_all: bool | None = None  # known once asked, per assignment
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
            self.unassigned_since = None
            self._settle_s = 0.0

    def _on_change(self, what: str, _consumer: Any, partitions: list[TopicPartition]) -> None:
        log.info("partitions %s: %s", what, sorted((p.topic, p.partition) for p in partitions))
        self.changes[what] += 1
        self._rebalancing = what != "assigned"
        now = time.monotonic()
        if what == "assigned":
            if self._paused:  # keep a retrying loop's partitions quiet, new ones included
                self._consumer.assign(partitions)
                self._consumer.pause(partitions)
            self.unassigned_since = None
            if self.assigned_at is None:
                self.assigned_at = now
            self._assigned |= {(p.topic, p.partition) for p in partitions}
        else:
            gone = {(p.topic, p.partition) for p in partitions}
            self._assigned -= gone
            if gone & self._in_hand:
                self._lost_in_hand = True
            # Fetched but not handed out: the next owner (maybe us again, from the last commit)
            # reads them afresh.
            self._early = [m for m in self._early if _key(m) not in gone]
            if self.unassigned_since is None:
                self.unassigned_since = now
        self._owns_all = None
        self._last_change = now

    def _owns_every_partition(self) -> bool:
        """Whether the assignment covers every partition of the subscribed topics (asked of the
        broker's metadata once per assignment, outside the rebalance callback)."""
        if self._owns_all is None:
            try:
                metadata = self._consumer.list_topics(timeout=5).topics
            except KafkaException:
                return False  # unknown: keep waiting out the settle time
            every = {(t, p) for t in self._topics if t in metadata for p in metadata[t].partitions}
            self._owns_all = bool(every) and every <= self._assigned
        return self._owns_all

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
            self._empty_since = None
            return early
        # consume(n, timeout) waits for n messages or the whole timeout: wait for the first one
        # only, then take what is already fetched, so a lone message is not held back.
        asked_at = time.monotonic()
        first = self._consumer.poll(timeout)
        self._polled_at = time.monotonic()
        if first is None:
            self._note_empty(asked_at)
            return []
        messages = (
            [first, *self._consumer.consume(max_messages - 1, 0)] if max_messages > 1 else [first]
        )
        good = [msg for msg in messages if not self._is_error(msg)]
        if good:
            self._empty_since = None
        else:
            self._note_empty(asked_at)
        return good

    def _note_empty(self, asked_at: float) -> None:
        """A poll that began at ``asked_at`` found nothing: the idle clock starts there unless an
        earlier empty poll started it."""
        if self._empty_since is None:
            self._empty_since = asked_at

    def _is_error(self, msg: Message) -> bool:
        """Whether poll returned an error event rather than a message: fatal ones raise, the
        rest are logged."""
        err = msg.error()
        if err is None:
            return False
        if err.code() == KafkaError._PARTITION_EOF:
            return True
        if err.fatal():
            raise PermanentFailure(f"fatal Kafka consumer error: {err}")
        if err.code() == KafkaError._MAX_POLL_EXCEEDED:
            self.changes["kicked"] += 1
            self._last_change = time.monotonic()
            log.warning(
                "left the group: no poll for max.poll.interval.ms (%s); the batch in hand "
                "will be consumed again from the last commit",
                err,
            )
        else:
            log.warning("consumer error: %s", err)
        return True

    # -- while the loop retries a batch -------------------------------------------------------

    def hold(self, messages: Sequence[Message]) -> None:
        """The loop is working on these messages (not yet committed): watch for their
        partitions being revoked. ``hold([])`` when the loop has nothing in hand."""
        self._in_hand = {_key(m) for m in messages}
        self._lost_in_hand = False

    def lost_in_hand(self) -> bool:
        """A revocation or loss took a partition of the held messages since ``hold``."""
        return self._lost_in_hand

    def pause(self) -> None:
        if not self._paused:
            self._paused = True
            self._consumer.pause(self._consumer.assignment())

    def resume(self) -> None:
        if self._paused:
            self._paused = False
            self._consumer.resume(self._consumer.assignment())

    def since_poll(self) -> float:
        """Seconds since this process last polled (librdkafka's max.poll.interval clock)."""
        return time.monotonic() - self._polled_at

    def keepalive(self, timeout: float) -> None:
        """Poll while paused: serves rebalance callbacks and tells librdkafka the process is
        alive. A message can still come back (fetched just before a pause took effect): it is
        kept, in order, for the next ``poll_batch``."""
        msg = self._consumer.poll(timeout)
        self._polled_at = time.monotonic()
        if msg is not None and not self._is_error(msg):
            self._early.append(msg)

    def unassigned_for(self) -> float:
        """Seconds without a partition assignment (since startup or the last revocation);
        0 while assigned, even to nothing (more members than partitions)."""
        since = self.unassigned_since
        return 0.0 if since is None else time.monotonic() - since

    def idle_for(self) -> float:
        """Seconds since polls started finding nothing, or since the last assignment change if
        later; 0 until settled, while a rebalance is in progress and while messages arrive."""
        if self.assigned_at is None or self._last_change is None or self._rebalancing:
            return 0.0
        if self._empty_since is None:
            return 0.0
        now = time.monotonic()
        if now - self._started < self._settle_s and not self._owns_every_partition():
            return 0.0
        return now - max(self._empty_since, self._last_change)

    def commit(self, messages: Sequence[Message]) -> None:
        """Commit the offset after the last message of each partition, synchronously."""
        highest: dict[tuple[str, int], int] = {}
        for msg in messages:
            topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
            assert topic is not None and partition is not None and offset is not None
            key = (topic, partition)
            highest[key] = max(highest.get(key, -1), offset)
        if not highest:
            return
        try:
            self._consumer.commit(
                offsets=[TopicPartition(t, p, o + 1) for (t, p), o in highest.items()],
                asynchronous=False,
            )
        except KafkaException as exc:
            raise commit_failure(exc.args[0]) from exc

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
