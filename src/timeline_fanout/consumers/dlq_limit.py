"""The dead-letter limit: when failing events stop looking like poison and start looking like us.

After arroyo's ``DlqLimit``. An event the applier cannot apply, alone, is *poison* and goes to the
dead-letter topic; but when events keep failing, the likelier cause is our code or a dependency,
and dead-lettering on would quietly empty the stream into the DLQ. Two limits, over events that
reached the applier (counted across batches, so the verdict never depends on batch size):

- ``max_consecutive``: more than this many failures in a row;
- ``max_ratio``: more than ``max_ratio * window`` failures among the last ``window`` events.

Messages rejected at decode (malformed, unknown or misplaced types) do not count: decoding is a
pure function of the bytes, so such a message is wrong on its face, will fail the same way on
every retry, and says nothing about the health of the consumer. They are counted separately.

Invariant kept with the loop (consumers/loop.py): events of an unbroken failure streak are
neither dead-lettered nor committed until an event after them applies, so a consumer that halts
on ``max_consecutive`` has dead-lettered nothing of the streak, whatever the batch sizes were.
"""

from __future__ import annotations

import copy
from collections import deque
from dataclasses import dataclass, field

from timeline_fanout.consumers.halts import DlqLimitExceeded


@dataclass(frozen=True, slots=True)
class DlqLimit:
    max_consecutive: int | None = 10
    max_ratio: float | None = 0.1
    window: int = 1000

    def __post_init__(self) -> None:
        if self.max_consecutive is not None and self.max_consecutive < 1:
            raise ValueError("max_consecutive must be at least 1 (or None for no limit)")
        if self.max_ratio is not None and not 0 <= self.max_ratio <= 1:
            raise ValueError("max_ratio must be in [0, 1] (1 or None: no limit)")
        if self.window < 1:
            raise ValueError("window must be at least 1")


@dataclass(slots=True)
class DlqBudget:
    """Outcomes of applied events, in the order they were applied."""

    limit: DlqLimit
    streak: int = 0  # failures since the last success
    seen: int = 0  # events recorded
    _failures: deque[int] = field(default_factory=deque)  # sequence numbers, within the window

    def copy(self) -> DlqBudget:
        """A trial copy for one batch: adopted only if the batch completes, so a batch that is
        retried (after a transient failure) is never counted twice."""
        return copy.deepcopy(self)

    def applied(self, count: int = 1) -> None:
        if count:
            self.seen += count
            self.streak = 0
            self._trim()

    def failed(self) -> None:
        """Record one failure; raises ``DlqLimitExceeded`` if it passes a limit."""
        self.seen += 1
        self.streak += 1
        self._failures.append(self.seen)
        self._trim()
        limit = self.limit
        if limit.max_consecutive is not None and self.streak > limit.max_consecutive:
            raise DlqLimitExceeded(
                f"{self.streak} events in a row failed to apply "
                f"(FANOUT_DLQ_MAX_CONSECUTIVE={limit.max_consecutive})"
            )
        if limit.max_ratio is not None and len(self._failures) > limit.max_ratio * limit.window:
            raise DlqLimitExceeded(
                f"{len(self._failures)} of the last {limit.window} events failed "
                f"to apply (FANOUT_DLQ_MAX_RATIO={limit.max_ratio} of "
                f"FANOUT_DLQ_WINDOW={limit.window})"
            )

    def _trim(self) -> None:
        oldest = self.seen - self.limit.window
        while self._failures and self._failures[0] <= oldest:
            self._failures.popleft()
