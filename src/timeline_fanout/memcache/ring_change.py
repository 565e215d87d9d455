"""The operator's ring change: a new set of memcached servers, taken into use while every
consumer and API worker runs (memcache/ring.py says why each step is safe).

Steps, each a compare-and-set of the shared record, so two operators cannot interleave:

1. the next version is written *moving*;
2. wait ``hold``: every process has read it (a lease on the record lasts ``lease_s`` from the
   start of its read, and an exchange begun under it ends within the timeouts);
3. the guards the new version adds are given the epochs the old guards agree on (best effort:
   a process taking a lease does the same), so no server looks empty for want of a copy;
4. the version is written *stable*;
5. wait ``hold`` again: when this returns no process is still moving, and the next change may
   begin.

A change interrupted anywhere is finished by running it again with the same servers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

from timeline_fanout.memcache.cluster import MemcacheCluster
from timeline_fanout.memcache.ring import RingRecord, RingSource, RingView
from timeline_fanout.memcache.trust import ServerTrust, TrustSettings

__all__ = [
    "EpochSettler",
    "RingChangeError",
    "RingChanged",
    "change_ring",
    "hold_s",
    "settle_epochs",
]


class RingChangeError(RuntimeError):
    """The change cannot go on: another change is under way, or the record changed under it."""


class RingChanged(NamedTuple):
    """The record the change ended with, and the servers whose epochs could not be settled
    (down meanwhile: processes settle them when they take a lease)."""

    record: RingRecord
    unsettled: tuple[str, ...]


class EpochSettler(Protocol):
    """Step 3: takes a lease on every server of both versions under the ``moving`` record,
    which gives the guards new in its target the epoch the old guards agree on; returns the
    servers that stayed unusable."""

    def __call__(self, moving: RingRecord) -> tuple[str, ...]: ...


def hold_s(ring_lease_s: float, bounds: TrustSettings) -> float:
    """How long a step waits for every process to have read it: a ring lease, plus an
    exchange begun just before it ran out (a guard read and a request, each bounded by the
    timeout), plus a second of slack for clocks that tick at different rates."""
    return ring_lease_s + 2 * bounds.timeout_s + 1.0


def change_ring(
    source: RingSource,
    configured: Sequence[str],
    servers: Sequence[str],
    hold: float,
    settle: EpochSettler,
    say: Callable[[str], None] = lambda _: None,
    sleep: Callable[[float], None] = time.sleep,
) -> RingChanged:
    """Moves the ring to ``servers`` (host:port). ``configured``: the servers processes use
    while no record was ever written (``FANOUT_MEMCACHED``), written as the first version if
    there is none."""
    target = tuple(sorted(set(servers)))
    record = source.read_ring()
    if record is None:
        record = RingRecord.of(configured)
        _swap(source, None, record)
        say(f"recorded version {record.version}: {', '.join(record.servers)}")
    if record.moving and record.servers != target:
        raise RingChangeError(
            f"version {record.version} is still being moved to {', '.join(record.servers)}: "
            "finish that change first (run it again with those servers)"
        )
    if not record.moving:
        moving = record.moved_to(target)
        _swap(source, record, moving)
        record = moving
        say(f"version {record.version} moving to {', '.join(target)}; waiting {hold:.0f} s")
    sleep(hold)
    unsettled = settle(record)
    stable = record.settled()
    _swap(source, record, stable)
    say(f"version {stable.version} stable; waiting {hold:.0f} s")
    sleep(hold)
    return RingChanged(stable, unsettled)


def _swap(source: RingSource, expected: RingRecord | None, record: RingRecord) -> None:
    if not source.swap_ring(expected, record):
        raise RingChangeError("the ring record changed meanwhile: another change is under way")


def settle_epochs(bounds: TrustSettings) -> EpochSettler:
    """Step 3 over the servers the record names (host:port), each reached within ``bounds``."""

    def settle(moving: RingRecord) -> tuple[str, ...]:
        nodes = sorted({node for ring in moving.rings[-2:] for node in ring})
        pairs = [(host, int(port)) for host, port in (node.rsplit(":", 1) for node in nodes)]
        trust = ServerTrust(nodes, bounds, ring=RingView(moving))
        cluster = MemcacheCluster(pairs, trust=trust)
        try:
            return tuple(cluster.unusable())
        finally:
            cluster.close()

    return settle
