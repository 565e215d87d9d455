"""Follower and following counts in one lookup, whatever the lists' sizes and the store.

A page of a list shows its count (api/routes/users.py), so the count must cost what a small
list's page costs. The SQLite store keeps counts in the edge's own transaction
(``EdgeGraph.counts_kept``): it is asked directly (``KeptCounts``). The Mongo store counts the
index of active edges, which costs as much as the list is long, and cannot keep a count beside
an edge without a transaction; so its counts are cached (``CachedCounts``): one memcached item
per user, ``{ns}|ct|{user}`` = ``c <followers> <following>``, or ``~`` while a reader fills it.

**Why a cached count is right.** The graph consumer marks the item of every user whose edges a
batch wrote stale (APPEND `` s``; DELETE where the item takes no APPEND), after the store write
and before the batch is committed (consumers/graph_apply.py; a batch applied again after a
crash marks again). A reader counts the store through the fence of the lists
(graph/lists/fencing.py): ADD ``~``, ``gets``, count, CAS over what it saw if that was not a
fresh count. Take a write W whose store write a count C missed: W's store write came after C,
hence after C's ``gets``, and W's mark after that. If the mark came before C's CAS, it changed
the item (or, the item gone, the CAS finds nothing), and the CAS fails; if after, it marks C's
count stale. So a fresh count never misses a write whose batch has been applied, in any
interleaving of readers and writers. A memcached restart between a ``gets`` and its CAS closes
the connection the CAS would go on (the client never reconnects in between,
memcache/wire.py), so that CAS fails too: CAS ids restart from 1 with the server and are not
what rules it out. An item expires after ``heal_s``, as every cached item does.

**Bounded work.** A stale count is counted again by one reader at a time, at most once a second
per user: the reader that ADDs the user's lease ``{ns}|cl|{user}`` (``RECOUNT_S``, which
memcached's whole-second clock makes 1 to 2 s) counts and answers the new count; every other
reader answers the stale count at once. So a page costs one GET, plus at most one count of the
list per second whatever the readers and the changes (a client publishing changes that change
nothing included), and a count is at most ``RECOUNT_S`` behind the store once the consumers have
caught up (a reader after that is elected and counts). While batches keep landing a count may
never be fresh, but the one left stale is the newest elected count (``_leave_stale``). Only a
user with no count at all (never read, or evicted) is counted by every reader that is not
elected, until the first elected count ends.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple, Protocol

from timeline_fanout.graph.lists.fencing import filling
from timeline_fanout.graph.lists.token_lists import ListLayout, TokenLists
from timeline_fanout.graph.model.edges import EdgeCounts, EdgeGraph
from timeline_fanout.graph.model.keys import KeySpace
from timeline_fanout.memcache import Item, Outcome
from timeline_fanout.memcache.interface import Cache

STALE = b" s"
_COUNTED = b"c"
# The recount lease's life. memcached's clock counts whole seconds, so an item given 2 s lives
# between 1 and 2 s: a stale count is counted again at most once a second per user.
RECOUNT_S = 2


class CountSource(Protocol):
    """Where a page's count comes from, and what a graph batch tells it."""

    def counts(self, user: str) -> EdgeCounts: ...

    def changed(self, users: Iterable[str]) -> None:
        """After a store write that changed these users' edges (before the batch commits)."""
        ...


class KeptCounts:
    """The store keeps its counts: asked directly, nothing to tell."""

    def __init__(self, store: EdgeGraph) -> None:
        self._store = store

    def counts(self, user: str) -> EdgeCounts:
        return self._store.counts(user)

    def changed(self, users: Iterable[str]) -> None:
        pass


class Cached(NamedTuple):
    counts: EdgeCounts
    stale: bool  # a batch changed the user's edges since it was counted


class CachedCounts:
    """Counts of a store that counts by reading, cached through the fence (module docstring).
    Not thread-safe: one per thread, as the cache client. ``recount_s``: how long a user's
    count is not counted again after it was (0: whenever it is stale)."""

    def __init__(
        self,
        cache: Cache,
        store: EdgeGraph,
        keys: KeySpace,
        heal_s: int,
        recount_s: int = RECOUNT_S,
    ) -> None:
        self._cache = cache
        self._fills = cache.fills()  # best-effort: a key moving is answered refused
        self._store = store
        self._keys = keys
        self._expire = heal_s  # as every cached item (docs/guarantees.md, bounded self-healing)
        self._recount_s = recount_s

    def key(self, user: str) -> bytes:
        return self._keys.count_keys([user])[0]

    def counts(self, user: str) -> EdgeCounts:
        key = self.key(user)
        item = self._cache.gets_many([key]).get(key)
        cached = None if item is None else _parse(item.value)
        if cached is not None and not cached.stale:
            return cached.counts
        if item is None and not self._cache.available([key])[0]:  # down, or moving
            return self._store.recounted(user)
        if not self._elected(user):  # another reader counts it, or did within recount_s
            return cached.counts if cached is not None else self._store.recounted(user)
        return self._fill(key, user)

    def _elected(self, user: str) -> bool:
        """Whether this reader counts: the one that ADDs the user's recount lease, which lives
        ``recount_s`` (so a user is counted at most once in that time, however many readers
        and changes)."""
        if self._recount_s <= 0:
            return True
        lease = self._keys.count_lease_keys([user])[0]
        if not self._cache.available([lease])[0]:  # its server down, or moving: no election
            return True
        won = self._fills.add_many({lease: b"1"}, self._recount_s)
        if won.get(lease) is Outcome.STORED:
            return True
        # Refused: another reader holds the lease, or it began moving meanwhile (or this
        # process lost its lease on the ring): then there is no election, and this one counts.
        return not self._cache.available([lease])[0]

    def _fill(self, key: bytes, user: str) -> EdgeCounts:
        """The fence: ``~`` ADDed, read with ``gets``, the store counted, CAS. An item that
        begins moving between servers meanwhile (memcache/ring.py) is left unwritten."""
        seen: Item | None = filling(self._fills, [key], self._expire).get(key)
        counted = self._store.recounted(user)
        if seen is not None and ((cached := _parse(seen.value)) is None or cached.stale):
            value = b"%s %d %d" % (_COUNTED, counted.followers, counted.following)
            stored = self._fills.cas_many({key: (value, seen.cas)}, self._expire)
            if stored.get(key) is not Outcome.STORED:
                self._leave_stale(key, value)
        return counted

    def _leave_stale(self, key: bytes, value: bytes) -> None:
        """A batch marked the item while it was counted, so the count is not fresh; it is left
        marked stale in place of ``~`` or of an older stale count, so that readers that are not
        elected answer the newest count there is, not none (each counting the store) nor one
        that batches landing during every count would leave behind for good. A stale count is
        never taken for a fresh one, so this changes no argument. The CAS fails where a reader
        or a batch got there first: theirs stands."""
        now: Item | None = self._cache.gets_many([key]).get(key)
        if now is not None and ((cached := _parse(now.value)) is None or cached.stale):
            self._fills.cas_many({key: (value + STALE, now.cas)}, self._expire)

    def changed(self, users: Iterable[str]) -> None:
        """Marks the users' counts stale (APPEND ``STALE``: the value stays, for the readers
        that are not elected to count); an item that takes no APPEND (missing, or at
        memcached's size limit) is deleted. Both checked: a server that does not answer raises,
        and the batch is retried."""
        unique = sorted(set(users))
        if not unique:
            return
        keys = self._keys.count_keys(unique)
        appended = self._cache.append_many(dict.fromkeys(keys, STALE))
        self._cache.delete_many([k for k in keys if appended.get(k) is not Outcome.STORED])


def _parse(value: bytes) -> Cached | None:
    """``c <followers> <following>``, then any number of ``STALE`` marks; None for ``~`` (with
    marks or not) and for bytes that are not a count."""
    base = value.rstrip(b" s")
    parts = base.split(b" ")
    if len(parts) != 3 or parts[0] != _COUNTED or not (parts[1].isdigit() and parts[2].isdigit()):
        return None
    return Cached(EdgeCounts(int(parts[1]), int(parts[2])), len(base) != len(value))


def list_counts(store: EdgeGraph, lists: TokenLists[ListLayout]) -> CountSource:
    """The store itself where it keeps counts, else its counts cached beside ``lists`` (same
    servers, namespace and expiry)."""
    if store.counts_kept:
        return KeptCounts(store)
    return CachedCounts(lists.cache, store, lists.keys, lists.settings.heal_s)
