"""A ring record held in this process: the shared place every test process reads its ring
from (the stores that hold it in production are tested in tests/graph/stores)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from timeline_fanout.graph.model.keys import KeySpace
from timeline_fanout.memcache.ring import RingRecord, RingSource, RingView
from timeline_fanout.memcache.trust import ServerTrust, TrustSettings


class HeldRing:
    """``RingSource`` over one record in memory, swapped by compare-and-set as the stores
    swap theirs. ``broken``: the shared place stops answering (every read raises);
    ``reads``: how many times a process read it."""

    def __init__(self, record: RingRecord | None) -> None:
        self.record = record
        self.reads = 0
        self.broken = False

    def read_ring(self) -> RingRecord | None:
        self.reads += 1
        if self.broken:
            raise OSError("the shared place does not answer")
        return self.record

    def swap_ring(self, expected: RingRecord | None, record: RingRecord) -> bool:
        if self.record != expected:
            return False
        self.record = record
        return True


def process_trust(
    servers: Sequence[str],
    source: RingSource,
    bounds: TrustSettings,
    lease_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> ServerTrust:
    """What one process of the product holds: its trust in ``servers``, under leases of
    ``lease_s`` on the register (``source``) every process of the test shares, placing the
    product's keys as it does (``KeySpace.families``)."""
    view = RingView(
        RingRecord.of(servers), source, lease_s, clock=clock, families=KeySpace.families
    )
    return ServerTrust(servers, bounds, clock=clock, ring=view)


def own_trust(servers: Sequence[tuple[str, int]]) -> ServerTrust:
    """A process's trust in ``servers`` under a record of its own (no shared register),
    placing the product's keys as the product does (``KeySpace.families``)."""
    names = [f"{host}:{port}" for host, port in servers]
    view = RingView(RingRecord.of(names), families=KeySpace.families)
    return ServerTrust(names, ring=view)
