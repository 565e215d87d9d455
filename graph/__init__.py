"""The follower graph: the edge store (source of truth) and the token lists in memcached."""

from graph.cache import CacheUnavailable, MemcacheCluster, Outcome
from graph.edges import EdgeChange, EdgeCounts, EdgeState, EdgeStore, RemovedUser
from graph.keys import ListKind, ListRef
from graph.lists import ListSettings, ListWriteError, Snapshot
from graph.open_store import open_edge_store
from graph.sharded_lists import ListStore

__all__ = [
    "CacheUnavailable",
    "EdgeChange",
    "EdgeCounts",
    "EdgeState",
    "EdgeStore",
    "ListKind",
    "ListRef",
    "ListSettings",
    "ListStore",
    "ListWriteError",
    "MemcacheCluster",
    "Outcome",
    "RemovedUser",
    "Snapshot",
    "open_edge_store",
]
