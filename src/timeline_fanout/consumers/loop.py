"""The consume loop: decode, dead-letter, apply, confirm, commit; repeat.

Commit policy (at-least-once): a batch is committed only after its effects are applied and its
dead letters are acknowledged. What a failure does depends on what it is
(consumers/failures.py, graph/failures.py), never on the size of the batch:

- *transient* (a memcached server or the store not answering, Kafka slow): the same batch is
  retried with backoff, never skipped, never committed past. Meanwhile the partitions are paused
  and polled, so the member stays in its group however long the outage lasts;
- *permanent* (a missing table, a read-only or corrupt file, bad credentials, a fatal Kafka
  error): the loop halts (``PermanentFailure``) without committing;
- anything else makes the event suspect (*poison*): the batch is re-applied one event at a time
  and the events that still fail are dead-lettered — within the dead-letter limit
  (consumers/dlq_limit.py); past it, the loop halts (``DlqLimitExceeded``).

Events of an unbroken failure streak are held back: neither dead-lettered nor committed until an
event after them applies (or the run ends cleanly). So when every event fails, the consumer halts
with nothing of the streak dead-lettered, with batches of one as with batches of thousands.

Rebalances: if the partitions of the batch in hand are revoked while it is retried, the batch is
abandoned to their new owner (it is consumed again from the last commit). A commit refused because
the group moved on is dropped for the same reason.

Each topic admits only its own event types (``topic_types``): a ``fanout_task`` published on the
posts topic is dead-lettered, not applied.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from confluent_kafka import Message

from timeline_fanout.consumers.assignment_watch import AssignmentWatch
from timeline_fanout.consumers.dead_letter import DeadLetters
from timeline_fanout.consumers.dlq_limit import DlqBudget, DlqLimit
from timeline_fanout.consumers.failures import Failure, classify
from timeline_fanout.consumers.halts import (
    DlqLimitExceeded,
    PermanentFailure,
    StuckWithoutAssignment,
)
from timeline_fanout.consumers.kafka_source import CommitRejected, KafkaSource
from timeline_fanout.consumers.positions import Positioned, Rejected, decode_message
from timeline_fanout.consumers.pulse import Pulse, no_pulse

log = logging.getLogger("fanout.consumer")
T = TypeVar("T")
KEEPALIVE_POLL_S = 0.25  # while retrying: how often the paused consumer polls (and sees a stop)


class Applier(Protocol):
    @property
    def accepted(self) -> tuple[type, ...]:
        """The event classes this applier takes; others are dead-lettered."""
        ...

    def apply(self, batch: Sequence[Positioned], pulse: Pulse = no_pulse) -> object:
        """Apply the batch in bounded steps, calling ``pulse()`` between them
        (consumers/pulse.py). The loop judges an apply by whether it raised; what it returns
        is the applier's own account, for callers that drive it directly."""
        ...


@dataclass
class LoopStats:
    batches: int = 0
    applied: int = 0
    dead_lettered: int = 0  # rejected + apply_failed
    rejected: int = 0  # at decode: malformed, unknown or misplaced (input problems)
    apply_failed: int = 0  # decoded, but the applier failed on them alone (poison)
    retries: int = 0
    abandoned: int = 0  # batches given up to a new owner after a revocation
    commits_rejected: int = 0  # commits refused because the group had rebalanced
    busy_s: float = 0.0  # time spent handling batches, not waiting for them


@dataclass(frozen=True, slots=True)
class BatchReport:
    messages: list[Message]  # all committed
    applied: list[Positioned]
    dead_lettered: int
    seconds: float
    rejected: int = 0
    apply_failed: int = 0


@dataclass
class _Trial:
    """One batch applied: the dead-letter budget counted on a copy (adopted once the batch is
    through, so a retried batch is never counted twice), the events applied and those that
    failed alone."""

    budget: DlqBudget
    applied: list[Positioned]
    failed: list[Rejected]


class Stopped(BaseException):
    """Asked to stop while a batch was still failing: exit without committing it.

    The loop's own signals derive from ``BaseException``: they cross the appliers (a pulse
    raises inside ``apply``) and must never be read as an event's failure by an
    ``except Exception``."""


class Abandoned(BaseException):
    """The batch's partitions were revoked while it was applied or retried: its new owner
    redoes it."""


@dataclass
class _Uncommitted:
    """Handled, not yet committed: one batch, or the batches of a failure streak held back."""

    messages: list[Message] = field(default_factory=list)
    applied: list[Positioned] = field(default_factory=list)
    rejected: int = 0
    failed: list[Rejected] = field(default_factory=list)  # dead-lettered just before the commit
    seconds: float = 0.0


MIN_POLL_S = 0.01  # the shortest poll of an idle run nearing its end


@dataclass
class ConsumeLoop:
    source: KafkaSource
    applier: Applier
    dead_letters: DeadLetters
    stop: threading.Event
    batch_size: int = 1000
    poll_timeout: float = 0.5
    max_backoff: float = 5.0
    dlq_limit: DlqLimit = field(default_factory=DlqLimit)
    # Event classes each topic admits (on top of the applier's own); None: the applier's, on
    # every topic (stand-in appliers in tests).
    topic_types: Mapping[str, tuple[type, ...]] | None = None
    # ``run(until_idle=...)`` halts after this long without an assignment; None: the largest of
    # 60 s, three session timeouts and twice the longest rebalance (see ``__post_init__``).
    stuck_after: float | None = None
    # Called with each committed batch: progress bars and metrics observe the loop this way.
    observers: list[Callable[[BatchReport], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.stats = LoopStats()
        self.budget = DlqBudget(self.dlq_limit)
        self._pending: _Uncommitted | None = None
        self._accepted: dict[str | None, tuple[type, ...]] = {}
        session = self.source.session_timeout_s
        # A rebalance waits up to max.poll.interval.ms for every member to rejoin (one may be
        # inside a long batch) plus a session timeout to expire one that died: no sooner than
        # that is an assignment overdue, and a halt comes only after twice as long.
        longest_rebalance = session + self.source.max_poll_interval_s
        self.watch = AssignmentWatch(warn_after=longest_rebalance)
        if self.stuck_after is None:
            self.stuck_after = max(60.0, 3 * session, 2 * longest_rebalance)

    def run(self, until_idle: float | None = None) -> LoopStats:
        """Until stopped (or idle for ``until_idle`` seconds). A stop that arrives while a batch
        is still failing ends the run without committing that batch: a clean exit, since the
        batch is consumed again by whoever takes the partition next.

        Raises ``ConsumerHalted`` (consumers/halts.py) when retrying cannot help; with
        ``until_idle``, also when no assignment has come for ``stuck_after`` seconds."""
        try:
            while not self.stop.is_set():
                self._watch_assignment(until_idle is not None)
                messages = self.source.poll_batch(self.batch_size, self._poll_wait(until_idle))
                if self._pending is not None and self.source.lost_in_hand():
                    self._abandon()
                if messages:
                    self._handle(messages)
                elif until_idle is not None and self.source.idle_for() >= until_idle:
                    break
            # A clean end: a streak still held back stayed within the limit, so it is poison.
            if self._pending is not None:
                self._commit(self._pending)
        except Stopped as exc:
            log.warning("stopped while a batch was failing (%s); it was not committed", exc)
        except Abandoned:
            self._abandon()
        return self.stats

    def _poll_wait(self, until_idle: float | None) -> float:
        """``poll_timeout``, or less when that would carry an idle run past ``until_idle``: the
        run ends within a few milliseconds of the idle time instead of up to a poll later."""
        if until_idle is None:
            return self.poll_timeout
        return min(self.poll_timeout, max(until_idle - self.source.idle_for(), MIN_POLL_S))

    def _watch_assignment(self, until_idle: bool) -> None:
        unassigned = self.source.unassigned_for()
        self.watch.check(unassigned, self.source.assigned_at is not None)
        assert self.stuck_after is not None
        if until_idle and unassigned >= self.stuck_after:
            raise StuckWithoutAssignment(
                f"no partition assignment for {unassigned:.0f}s (limit {self.stuck_after:.0f}s, "
                "FANOUT_REBALANCE_STUCK_S): the group's rebalance is not completing; a static "
                "member (FANOUT_INSTANCE_ID) that exited may be holding it up"
            )

    def _handle(self, messages: list[Message]) -> None:
        started = time.monotonic()
        batch = self._pending or _Uncommitted()
        self._pending = None
        self.source.hold(batch.messages + messages)
        good: list[Positioned] = []
        rejected = 0
        for msg in messages:
            decoded = decode_message(msg, self._accepted_on(msg.topic()))
            if isinstance(decoded, Rejected):
                self.dead_letters.send(decoded)
                rejected += 1
            else:
                good.append(decoded)
        try:
            trial = self._retrying(lambda: self._apply(good))
            self.budget = trial.budget
            batch.messages += messages
            batch.applied += trial.applied
            batch.rejected += rejected
            batch.failed += trial.failed
            batch.seconds += time.monotonic() - started
            if trial.budget.streak:  # the last events failed: judge them once a later event applies
                self._pending = batch
                return
            self._commit(batch)
        except Abandoned:
            self._abandon()

    def _accepted_on(self, topic: str | None) -> tuple[type, ...]:
        found = self._accepted.get(topic)
        if found is None:
            own = self.applier.accepted
            if self.topic_types is not None:
                allowed = self.topic_types.get(topic or "", ())
                own = tuple(t for t in own if t in allowed)
            found = self._accepted[topic] = own
        return found

    def _apply(self, batch: list[Positioned]) -> _Trial:
        """Apply a batch; on a poison suspect, each event alone. Transient and permanent
        failures propagate to ``_retrying``."""
        trial = _Trial(self.budget.copy(), [], [])
        if not batch:
            return trial
        try:
            self.applier.apply(batch, self._pulse)
        except Exception as exc:
            if classify(exc) is not Failure.POISON:
                raise
            log.warning(
                "batch failed (%s: %s); applying its events one at a time", type(exc).__name__, exc
            )
        else:
            trial.budget.applied(len(batch))
            trial.applied = batch
            return trial
        for item in batch:
            try:
                self.applier.apply([item], self._pulse)
            except Exception as exc:
                if classify(exc) is not Failure.POISON:
                    raise
                reason = f"apply failed: {type(exc).__name__}: {exc}"
                trial.failed.append(Rejected(reason, item.origin, item.raw))
                try:
                    trial.budget.failed()
                except DlqLimitExceeded as halt:
                    raise halt from exc
            else:
                trial.budget.applied()
                trial.applied.append(item)
        return trial

    def _commit(self, batch: _Uncommitted) -> None:
        """Dead-letter the batch's apply failures, confirm every dead letter, commit, report."""
        self._pending = None
        for rejected in batch.failed:
            self.dead_letters.send(rejected)
        self._retrying(self.dead_letters.confirm)
        committed = self._commit_offsets(batch.messages)
        self.source.hold([])
        if committed:
            self._report(batch)

    def _commit_offsets(self, messages: list[Message]) -> bool:
        """False when the group has moved on: the partitions' new owner consumes the messages
        again from the last commit, so the refusal is dropped, never retried."""
        try:
            self._retrying(lambda: self.source.commit(messages))
        except CommitRejected as exc:
            self.stats.commits_rejected += 1
            log.warning(
                "commit refused, the group has rebalanced (%s): %d messages will be consumed "
                "again by their partitions' new owner",
                exc,
                len(messages),
            )
            return False
        return True

    def _report(self, batch: _Uncommitted) -> None:
        """A committed batch: to the observers, the stats and the log."""
        dead = batch.rejected + len(batch.failed)
        report = BatchReport(
            batch.messages,
            batch.applied,
            dead,
            batch.seconds,
            rejected=batch.rejected,
            apply_failed=len(batch.failed),
        )
        for observe in self.observers:
            observe(report)
        self.stats.batches += 1
        self.stats.applied += len(batch.applied)
        self.stats.dead_lettered += dead
        self.stats.rejected += batch.rejected
        self.stats.apply_failed += len(batch.failed)
        self.stats.busy_s += batch.seconds
        log.info(
            "batch applied",
            extra={
                "messages": len(batch.messages),
                "applied": len(batch.applied),
                "dead_lettered": dead,
                "ms": round(batch.seconds * 1000, 1),
            },
        )

    def _abandon(self) -> None:
        """The partitions of the batch in hand (or held back) were revoked: its new owner
        consumes it again from the last commit, so nothing of it is committed here."""
        self.stats.abandoned += 1
        self._pending = None
        self.source.hold([])
        log.warning(
            "partitions of the batch in hand were revoked: abandoned, uncommitted, to their "
            "new owner (consumed again from the last commit)"
        )

    def _retrying(self, step: Callable[[], T]) -> T:
        """Run ``step`` until it succeeds, retrying transient failures with backoff while the
        partitions are paused and polled (see consumers/kafka_source.py)."""
        backoff = 0.1
        try:
            while True:
                try:
                    return step()
                except Exception as exc:
                    failure = classify(exc)
                    if failure is Failure.PERMANENT:
                        raise PermanentFailure(f"{type(exc).__name__}: {exc}") from exc
                    if failure is not Failure.TRANSIENT:
                        raise
                    self.stats.retries += 1
                    log.warning("transient failure, retrying in %.1fs: %s", backoff, exc)
                    self.source.pause()
                    self._keepalive(backoff, str(exc))
                    backoff = min(backoff * 2, self.max_backoff)
        finally:
            self.source.resume()  # paused by the retries above or by a pulse of the step

    def _pulse(self) -> None:
        """Between the steps of a long apply (consumers/pulse.py): once the last poll is a third
        of max.poll.interval old, pause the partitions (until the batch is through: messages
        fetched meanwhile wait, in order, for the next batch) and poll once."""
        if self.source.since_poll() < self.source.max_poll_interval_s / 3:
            return
        self.source.pause()
        self.source.keepalive(0)
        if self.source.lost_in_hand():
            raise Abandoned()

    def _keepalive(self, seconds: float, failing: str) -> None:
        """Wait ``seconds`` polling the paused consumer; raise ``Stopped`` on a stop and
        ``Abandoned`` if the batch's partitions are revoked meanwhile."""
        deadline = time.monotonic() + seconds
        while True:
            if self.stop.is_set():
                raise Stopped(failing)
            if self.source.lost_in_hand():
                raise Abandoned()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self.source.keepalive(min(remaining, KEEPALIVE_POLL_S))
