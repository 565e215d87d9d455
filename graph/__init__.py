"""The follower graph: its types (`model`), the edge stores that are its source of truth
(`stores`), the token lists cached in memcached (`lists`) and the home timelines (`timelines`).

Inside, dependencies run one way: `model` imports nothing of the others; `stores` and `lists`
build on `model`; `timelines` on `lists` and `model`. The memcached client is the `memcache`
package, which imports nothing of this one.
"""

from graph.lists.sharded import ListStore
from graph.lists.token_lists import ListSettings, ListWriteError
from graph.model.edges import EdgeChange, EdgeCounts, EdgeState, EdgeStore, RemovedUser, Snapshot
from graph.model.keys import ListKind, ListRef
from graph.stores.open import open_edge_store

__all__ = [
    "EdgeChange",
    "EdgeCounts",
    "EdgeState",
    "EdgeStore",
    "ListKind",
    "ListRef",
    "ListSettings",
    "ListStore",
    "ListWriteError",
    "RemovedUser",
    "Snapshot",
    "open_edge_store",
]
