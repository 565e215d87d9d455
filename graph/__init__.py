"""The follower graph: the edge store (source of truth) and the token lists in memcached."""

from graph.cache import CacheUnavailable, MemcacheCluster
from graph.edges import EdgeChange, EdgeCounts, EdgeStore, RemovedUser
from graph.lists import ListKind, ListRef, ListSettings, ListStore, ListWriteError
from graph.open_store import open_edge_store

__all__ = [
    "CacheUnavailable",
    "EdgeChange",
    "EdgeCounts",
    "EdgeStore",
    "ListKind",
    "ListRef",
    "ListSettings",
    "ListStore",
    "ListWriteError",
    "MemcacheCluster",
    "RemovedUser",
    "open_edge_store",
]
