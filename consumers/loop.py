"""The consume loop: decode, dead-letter, apply, confirm, commit; repeat.

Commit policy: a batch is committed only after its effects are applied and its dead letters are
acknowledged. A transient failure (a memcached server or the store not answering) retries the
same batch with backoff and never skips it. Any other exception is treated as a poison event: the
batch is re-applied one event at a time and only the events that still fail are dead-lettered.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pymongo.errors import ConnectionFailure, OperationFailure

from consumers.dead_letter import DeadLetterError, DeadLetters
from consumers.kafka_source import KafkaSource
from consumers.positions import Positioned, Rejected, decode_message
from graph import CacheUnavailable, ListWriteError
from producers import PublishError

log = logging.getLogger("fanout.consumer")
TRANSIENT = (
    CacheUnavailable,
    ListWriteError,
    DeadLetterError,
    PublishError,
    sqlite3.OperationalError,
    ConnectionFailure,
    OperationFailure,
)


class Applier(Protocol):
    @property
    def accepted(self) -> tuple[type, ...]:
        """The event classes this applier takes; others are dead-lettered."""
        ...

    def apply(self, batch: Sequence[Positioned]) -> Any: ...


@dataclass
class LoopStats:
    batches: int = 0
    applied: int = 0
    dead_lettered: int = 0
    retries: int = 0
    busy_s: float = 0.0  # time spent handling batches, not waiting for them


@dataclass(frozen=True, slots=True)
class BatchReport:
    messages: list[Any]  # confluent_kafka Messages, all committed
    applied: list[Positioned]
    dead_lettered: int
    seconds: float


class Stopped(Exception):
    """Asked to stop while a batch was still failing: exit without committing it."""


@dataclass
class ConsumeLoop:
    source: KafkaSource
    applier: Applier
    dead_letters: DeadLetters
    stop: threading.Event
    batch_size: int = 1000
    poll_timeout: float = 0.5
    max_backoff: float = 5.0
    # Called with each committed batch: progress bars and metrics observe the loop this way.
    observers: list[Callable[[BatchReport], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.stats = LoopStats()

    def run(self, until_idle: float | None = None) -> LoopStats:
        """Until stopped (or idle for ``until_idle`` seconds). A stop that arrives while a batch
        is still failing ends the run without committing that batch: a clean exit, since the
        batch is consumed again by whoever takes the partition next."""
        try:
            while not self.stop.is_set():
                messages = self.source.poll_batch(self.batch_size, self.poll_timeout)
                if messages:
                    self._handle(messages)
                elif until_idle is not None and self.source.idle_for() >= until_idle:
                    break
        except Stopped as exc:
            log.warning("stopped while a batch was failing (%s); it was not committed", exc)
        return self.stats

    def _handle(self, messages: list[Any]) -> None:
        started = time.monotonic()
        good: list[Positioned] = []
        for msg in messages:
            decoded = decode_message(msg, self.applier.accepted)
            if isinstance(decoded, Rejected):
                self.dead_letters.send(decoded)
                self.stats.dead_lettered += 1
            else:
                good.append(decoded)
        self._retrying(lambda: self._apply(good))
        self._retrying(self.dead_letters.confirm)
        self._retrying(lambda: self.source.commit(messages))
        elapsed = time.monotonic() - started
        report = BatchReport(messages, good, len(messages) - len(good), elapsed)
        for observe in self.observers:
            observe(report)
        self.stats.batches += 1
        self.stats.applied += len(good)
        self.stats.busy_s += elapsed
        log.info(
            "batch applied",
            extra={
                "messages": len(messages),
                "applied": len(good),
                "dead_lettered": len(messages) - len(good),
                "ms": round(elapsed * 1000, 1),
            },
        )

    def _apply(self, batch: list[Positioned]) -> None:
        if not batch:
            return
        try:
            self.applier.apply(batch)
        except TRANSIENT:
            raise
        except Exception:
            log.exception("batch failed; isolating the poison event")
            failed: list[tuple[Positioned, Exception]] = []
            for item in batch:
                try:
                    self.applier.apply([item])
                except TRANSIENT:
                    raise
                except Exception as exc:
                    failed.append((item, exc))
            if len(batch) > 1 and len(failed) == len(batch):
                # Every event fails on its own: the fault is ours, not the input's. Crash
                # without committing rather than dead-letter the whole stream.
                raise failed[0][1] from None
            for item, error in failed:
                reason = f"apply failed: {type(error).__name__}: {error}"
                self.dead_letters.send(Rejected(reason, item.origin, item.raw))
                self.stats.dead_lettered += 1

    def _retrying(self, step: Any) -> None:
        backoff = 0.1
        while True:
            try:
                step()
                return
            except TRANSIENT as exc:
                self.stats.retries += 1
                log.warning("transient failure, retrying in %.1fs: %s", backoff, exc)
                if self.stop.wait(backoff):
                    raise Stopped(str(exc)) from exc
                backoff = min(backoff * 2, self.max_backoff)
