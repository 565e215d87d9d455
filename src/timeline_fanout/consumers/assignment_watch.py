"""Saying so when a consumer has had no partition assignment for too long.

A rebalance normally completes within ``max.poll.interval.ms`` (the time the coordinator waits
for members to rejoin) plus a session timeout (to expire one that died). Past that, the group is
stuck: typically a static member (``group.instance.id``) that exited — static members send no
LeaveGroup, Apache Kafka removes them only after ``session.timeout.ms``, and the dev broker Tansu
may keep them for good. Nothing fails in that state, so without this watch it would be silent.

The warning repeats with a doubling interval (capped), so a long stall stays visible in the logs
without flooding them; being assigned again resets it.
"""

from __future__ import annotations

import logging

log = logging.getLogger("fanout.consumer")

HOW_TO = (
    "a static member (FANOUT_INSTANCE_ID) that exited without leaving holds the rebalance up "
    "until its session times out (never, on the dev broker): restart it with the same "
    "FANOUT_INSTANCE_ID (docs/operations.md)"
)


class AssignmentWatch:
    def __init__(self, warn_after: float, max_interval: float = 300.0) -> None:
        self.warn_after = warn_after
        self.max_interval = max_interval
        self.warnings = 0
        self._next = warn_after
        self._interval = warn_after

    def check(self, unassigned_for: float, ever_assigned: bool) -> None:
        """Called from the consume loop; ``unassigned_for`` is 0 while assigned."""
        if unassigned_for <= 0:
            self._next = self._interval = self.warn_after
            return
        if unassigned_for < self._next:
            return
        self.warnings += 1
        since = "the last revocation" if ever_assigned else "startup"
        log.warning(
            "no partition assignment for %.0fs since %s: the group's rebalance is not "
            "completing; %s",
            unassigned_for,
            since,
            HOW_TO,
            extra={"unassigned_s": round(unassigned_for, 1)},
        )
        self._interval = min(self._interval * 2, self.max_interval)
        self._next = unassigned_for + self._interval
