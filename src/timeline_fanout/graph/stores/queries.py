"""The queries every edge store answers from its own ``snapshot``."""

from __future__ import annotations

import abc

from timeline_fanout.graph.model.edges import Snapshot
from timeline_fanout.graph.model.keys import ListRef


class StoreQueries(abc.ABC):
    """What every store derives from its own ``snapshot``."""

    @abc.abstractmethod
    def snapshot(self, ref: ListRef) -> Snapshot: ...

    def all_members(self, ref: ListRef) -> list[str]:
        return self.snapshot(ref).members
