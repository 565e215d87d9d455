"""The follower graph: its types (`model`), the edge stores that are its source of truth
(`stores`), the token lists cached in memcached (`lists`) and the home timelines (`timelines`).

Inside, dependencies run one way: `model` imports nothing of the others; `stores` and `lists`
build on `model`; `timelines` on `lists` and `model`. The memcached client is the `memcache`
package, which imports nothing of this one.
"""

from timeline_fanout.graph.lists.sharded import ShardedLists
from timeline_fanout.graph.lists.token_lists import ListSettings, ListWriteError
from timeline_fanout.graph.model.edges import (
    CelebrityRegistry,
    EdgeChange,
    EdgeCounts,
    EdgeGraph,
    EdgeState,
    EdgeStore,
    PostStore,
    RemovedUser,
    Snapshot,
)
from timeline_fanout.graph.model.keys import ListKind, ListRef
from timeline_fanout.graph.stores.open import open_edge_store

__all__ = [
    "CelebrityRegistry",
    "EdgeChange",
    "EdgeCounts",
    "EdgeGraph",
    "EdgeState",
    "EdgeStore",
    "ListKind",
    "ListRef",
    "ListSettings",
    "ListWriteError",
    "PostStore",
    "RemovedUser",
    "ShardedLists",
    "Snapshot",
    "open_edge_store",
]
