"""Follower and following counts in one lookup, whatever the lists' sizes and the store.

A page of a list shows its count (api/routes/users.py), so the count must cost what a small
list's page costs. The SQLite store keeps counts in the edge's own transaction
(``EdgeStore.counts_kept``): it is asked directly (``KeptCounts``). The Mongo store counts the
index of active edges, which costs as much as the list is long, and cannot keep a count beside
an edge without a transaction; so its counts are cached (``CachedCounts``): one memcached item
per user, ``{ns}|ct|{user}`` = ``c <followers> <following>``, or ``~`` while a reader fills it.

**Why a cached count is exact.** The graph consumer DELETEs the item of every user whose edges a
batch wrote, after the store write and before the batch is committed (consumers/graph_apply.py;
a batch applied again after a crash deletes again). A reader fills an item through the fence of
the lists (graph/lists/fencing.py): ADD ``~``, ``gets``, count the store, CAS over the ``~`` it
saw. Take a write W whose store write a filler F's count missed: W's store write came after F's
count, hence after F's ``gets``, and W's DELETE after that; if the DELETE came before F's CAS,
the CAS finds nothing and fails; if after, it drops F's count. So no count committed misses a
write for longer than its batch takes to apply, in any interleaving of readers and writers; an
eviction or a restart between ``gets`` and CAS fails the CAS too, and an item expires after
``heal_s`` as every cached item does. The ``~`` need not be the reader's own: readers filling at
once each count after their ``gets`` and the first CAS stands (it changes the item, so the
others fail), and a ``~`` left by a crashed reader (or bytes that are not a count) is filled by
the next.

A count is counted once per change of the user's lists (the first page read after a batch that
touched them), not once per page; between changes a page pays one GET.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from graph.lists.token_lists import TokenLists
from graph.model.edges import EdgeCounts, EdgeStore
from graph.model.keys import KeySpace
from memcache import Item
from memcache.interface import Cache

FILLING = b"~"
_COUNTED = b"c"


class CountSource(Protocol):
    """Where a page's count comes from, and what a graph batch tells it."""

    def counts(self, user: str) -> EdgeCounts: ...

    def changed(self, users: Iterable[str]) -> None:
        """After a store write that changed these users' edges (before the batch commits)."""
        ...


class KeptCounts:
    """The store keeps its counts: asked directly, nothing to tell."""

    def __init__(self, store: EdgeStore) -> None:
        self._store = store

    def counts(self, user: str) -> EdgeCounts:
        return self._store.counts(user)

    def changed(self, users: Iterable[str]) -> None:
        pass


class CachedCounts:
    """Counts of a store that counts by reading, cached through the fence (module docstring).
    Not thread-safe: one per thread, as the cache client."""

    def __init__(self, cache: Cache, store: EdgeStore, keys: KeySpace, heal_s: int) -> None:
        self._cache = cache
        self._store = store
        self._keys = keys
        self._expire = heal_s  # as every cached item (docs/guarantees.md, bounded self-healing)

    def key(self, user: str) -> bytes:
        return self._keys.count_keys([user])[0]

    def counts(self, user: str) -> EdgeCounts:
        key = self.key(user)
        item = self._cache.gets_many([key]).get(key)
        counted = None if item is None else _parse(item.value)
        return counted if counted is not None else self._fill(key, user)

    def _fill(self, key: bytes, user: str) -> EdgeCounts:
        self._cache.add_many({key: FILLING}, self._expire)
        seen: Item | None = self._cache.gets_many([key]).get(key)
        counted = self._store.recounted(user)
        if seen is not None and _parse(seen.value) is None:  # ``~``, or bytes not ours
            value = b"%s %d %d" % (_COUNTED, counted.followers, counted.following)
            self._cache.cas_many({key: (value, seen.cas)}, self._expire)
        return counted

    def changed(self, users: Iterable[str]) -> None:
        """Checked DELETEs (a server that does not answer raises, and the batch is retried)."""
        unique = sorted(set(users))
        if unique:
            self._cache.delete_many(self._keys.count_keys(unique))


def _parse(value: bytes) -> EdgeCounts | None:
    parts = value.split(b" ")
    if len(parts) != 3 or parts[0] != _COUNTED or not (parts[1].isdigit() and parts[2].isdigit()):
        return None  # ``~``, or bytes that are not a count: counted again
    return EdgeCounts(int(parts[1]), int(parts[2]))


def list_counts(store: EdgeStore, lists: TokenLists) -> CountSource:
    """The store itself where it keeps counts, else its counts cached beside ``lists`` (same
    servers, namespace and expiry)."""
    if store.counts_kept:
        return KeptCounts(store)
    return CachedCounts(lists.cache, store, lists.keys, lists.settings.heal_s)
