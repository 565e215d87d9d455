"""A ring record held in this process: the shared place every test process reads its ring
from (the stores that hold it in production are tested in tests/graph/stores)."""

from __future__ import annotations

from timeline_fanout.memcache.ring import RingRecord


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
