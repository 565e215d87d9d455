"""Why a consumer stopped itself: the conditions that retrying cannot fix.

Each is raised out of ``ConsumeLoop.run`` with the batch in hand uncommitted, so nothing is
lost: whoever consumes the partition next (this process restarted, or another member) starts
from the last commit. ``fanout consume`` exits with ``exit_code`` and names the cause; the codes
are distinct so a supervisor or a script can tell them apart.
"""

from __future__ import annotations


class ConsumerHalted(Exception):
    exit_code = 3


class DlqLimitExceeded(ConsumerHalted):
    """More events failed to apply than the dead-letter limit allows: the fault is ours (a bug,
    a broken dependency), not the input's, and dead-lettering on would empty the stream."""

    exit_code = 3


class PermanentFailure(ConsumerHalted):
    """The edge store, the cache or Kafka answered with an error a retry cannot outlive (a
    missing table, a read-only or corrupt file, bad credentials, a fatal client error)."""

    exit_code = 4


class StuckWithoutAssignment(ConsumerHalted):
    """``--until-idle`` waited longer than the bound for a partition assignment that never came:
    the group's rebalance is not completing (see docs/operations.md, Rebalances)."""

    exit_code = 5
