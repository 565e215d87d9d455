"""The operator's ring change: a new set of memcached servers, taken into use while every
consumer and API worker runs (memcache/ring.py says why each step is safe).

Steps, each a compare-and-set of the shared record, so two operators cannot interleave:

1. the next version is written *moving*;
2. wait ``hold``: every process has read it (a lease on the record lasts ``lease_s`` from the
   start of its read, and an exchange begun under it ends within the timeouts);
3. the version is written *stable*;
4. wait ``hold`` again: when this returns no process is still moving, and the next change may
   begin.

The servers' epochs live in the same record (memcache/trust.py) and are carried over by each
step; a step refused because only an epoch changed meanwhile (a revocation, a server coming
back) is made again on the newer record. A change interrupted anywhere is finished by running
it again with the same servers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from timeline_fanout.memcache.ring import RingRecord, RingSource
from timeline_fanout.memcache.trust import TrustSettings

__all__ = ["RingChangeError", "change_ring", "hold_s"]

# Swaps refused because epochs changed meanwhile before a step gives up: each is a revocation
# or a server coming back, a few per failure, so this many means the record is churning.
STEP_ATTEMPTS = 50


class RingChangeError(RuntimeError):
    """The change cannot go on: another change is under way, or the record changed under it."""


def hold_s(ring_lease_s: float, bounds: TrustSettings) -> float:
    """How long a step waits for every process to have read it: a ring lease, plus an
    exchange begun just before it ran out (a probe and a request, each bounded by the
    timeout), plus a second of slack for clocks that tick at different rates."""
    return ring_lease_s + 2 * bounds.timeout_s + 1.0


def change_ring(
    source: RingSource,
    configured: Sequence[str],
    servers: Sequence[str],
    hold: float,
    say: Callable[[str], None] = lambda _: None,
    sleep: Callable[[float], None] = time.sleep,
    lease_s: float = 0.0,
) -> RingRecord:
    """Moves the ring to ``servers`` (host:port); returns the stable record it ended with.
    ``configured``: the servers processes use while no record was ever written
    (``FANOUT_MEMCACHED``), written as the first version if there is none, with the lease
    ``lease_s`` (``RingRecord.lease_s``). ``hold`` must outlast the record's lease."""
    target = tuple(sorted(set(servers)))
    record = source.read_ring()
    if record is None:
        record = RingRecord.of(configured, lease_s)
        if not source.swap_ring(None, record):
            raise RingChangeError("the ring record changed meanwhile: another change is under way")
        say(f"recorded version {record.version}: {', '.join(record.servers)}")
    if record.moving and record.servers != target:
        raise RingChangeError(
            f"version {record.version} is still being moved to {', '.join(record.servers)}: "
            "finish that change first (run it again with those servers)"
        )
    if not record.moving:
        record = _step(source, record, lambda stored: stored.moved_to(target))
        say(f"version {record.version} moving to {', '.join(target)}; waiting {hold:.0f} s")
    sleep(hold)
    stable = _step(source, record, RingRecord.settled)
    say(f"version {stable.version} stable; waiting {hold:.0f} s")
    sleep(hold)
    return stable


def _step(
    source: RingSource, before: RingRecord, make: Callable[[RingRecord], RingRecord]
) -> RingRecord:
    """``make`` applied to the stored record and swapped in; made again on the newer record
    while the swap is refused because only epochs changed meanwhile."""
    stored = before
    for _ in range(STEP_ATTEMPTS):
        after = make(stored)
        if source.swap_ring(stored, after):
            return after
        newer = source.read_ring()
        if newer is None or (newer.rings, newer.first, newer.moving) != (
            before.rings,
            before.first,
            before.moving,
        ):
            raise RingChangeError("the ring record changed meanwhile: another change is under way")
        stored = newer
    raise RingChangeError("the ring record's epochs kept changing: try again")
