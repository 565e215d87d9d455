"""A memcached client for pipelined batches: the text and meta protocols' wire (`wire`), one
connection per server made by an injected factory (`pools`), the router that places keys on a
rendezvous ring and keeps the epochs' rules (`router`), the executor of pipelined exchanges
(`executor`), the blocking command API over them (`cluster`), and its event-loop twin for reads
(`async_cluster`).

It imports nothing of this project's: every outcome of a write is a named value (`Outcome`),
and a server that cannot be reached is `CacheUnavailable`, never a miss.
"""

from timeline_fanout.memcache.cluster import MemcacheCluster, keep_ttl
from timeline_fanout.memcache.interface import Cache
from timeline_fanout.memcache.wire import (
    NOT_READ,
    AppendGroup,
    CacheUnavailable,
    Item,
    KeysMoving,
    Outcome,
    Refused,
)

__all__ = [
    "NOT_READ",
    "AppendGroup",
    "Cache",
    "CacheUnavailable",
    "Item",
    "KeysMoving",
    "MemcacheCluster",
    "Outcome",
    "Refused",
    "keep_ttl",
]
