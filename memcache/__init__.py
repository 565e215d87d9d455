"""A memcached client for pipelined batches: the text protocol's wire (`wire`), a blocking
cluster of servers on a rendezvous ring (`cluster`), and its event-loop twin for reads
(`async_cluster`).

It imports nothing of this project's: every outcome of a write is a named value (`Outcome`),
and a server that cannot be reached is `CacheUnavailable`, never a miss.
"""

from memcache.cluster import MemcacheCluster, keep_ttl
from memcache.interface import Cache
from memcache.wire import NOT_READ, CacheUnavailable, Item, Outcome

__all__ = [
    "NOT_READ",
    "Cache",
    "CacheUnavailable",
    "Item",
    "MemcacheCluster",
    "Outcome",
    "keep_ttl",
]
