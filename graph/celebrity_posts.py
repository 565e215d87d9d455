"""Celebrities' recent posts, cached, so that a timeline read makes no edge-store query.

Celebrities are never fanned out (consumers/fanout_apply.py): every reader merges their recent
posts into its timeline. Asking the edge store for them (and for who is a celebrity) on every
read put two store queries on the hot path of every read. Instead two kinds of memcached item
hold what the store would answer:

- ``{ns}|cp|{author}``: the author's newest ``cap`` posts as timeline members, newest first,
  separated by spaces;
- ``{ns}|celebrities``: the celebrities, separated by spaces.

They are cached answers, not token lists: written whole (SET), never appended to, rebuilt from
the store by a reader that finds one missing (ADD, so a reader's rebuild never replaces a
consumer's refresh), and they expire. The fan-out consumer refreshes an author's item in the
batch that stores a celebrity's post, after the store write, and the celebrity set when that
batch records a celebrity the cached set lacks: a follower normally sees the post as soon as the
batch is applied, as with a fanned-out post.

**Staleness bound.** Refreshes can still land out of order (a zombie or a replay racing the live
consumer), and a reader's rebuild can read the store just before a new celebrity is recorded.
So every item is written with an *absolute* expiry: the time its store read started plus
``ttl_s`` (memcached takes an expiry past 30 days as unix time). An item present at time T was
therefore built from a store read that started after T - ttl_s - 1 s (memcached's clock counts
whole seconds), and a post (or a new celebrity) committed to the store at time t is in every
item a read can find from t + ttl_s + 1 s on. Nothing extends an item's life.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Collection, Mapping, Sequence
from typing import NamedTuple

from graph.cache import Item, MemcacheCluster
from graph.edges import EdgeStore
from graph.keys import KeySpace
from graph.timeline_entries import TimelineEntry

DEFAULT_TTL_S = 5


class Recent(NamedTuple):
    """One celebrity's newest posts as timeline members, newest first; ``complete`` is False
    when only the first few were split off the item (the rest are older)."""

    members: list[str]
    complete: bool


@functools.lru_cache(maxsize=64)
def _names(raw: bytes) -> frozenset[str] | None:
    """The celebrity set item's names (remembered by its bytes: every read fetches it, and it
    changes only when someone becomes a celebrity); None if it is not ours."""
    try:
        return frozenset(raw.decode("ascii").split())
    except UnicodeDecodeError:
        return None


class CelebrityPosts:
    def __init__(
        self,
        cache: MemcacheCluster,
        store: EdgeStore,
        keys: KeySpace,
        cap: int,
        ttl_s: int = DEFAULT_TTL_S,
    ) -> None:
        self._cache = cache
        self._store = store
        self._keys = keys
        self._cap = cap
        self.ttl_s = ttl_s
        self.set_key = keys.celebrities_key()

    def keys(self, authors: Sequence[str]) -> list[bytes]:
        return self._keys.celebrity_posts_keys(authors)

    def _expiry(self) -> int:
        """Taken before the store read an item is built from: see the staleness bound."""
        return int(time.time()) + self.ttl_s

    # -- reads -----------------------------------------------------------------------------------

    def celebrities(self, found: Mapping[bytes, Item]) -> frozenset[str]:
        """The celebrity set from its item in ``found`` (a reader's multi-GET), else from the
        store, cached for the next readers."""
        item = found.get(self.set_key)
        names = None if item is None else _names(item.value)
        if names is not None:
            return names
        expire = self._expiry()
        names = frozenset(self._store.celebrities())
        self._cache.add_many({self.set_key: _joined(sorted(names))}, expire)
        return names

    def posts(
        self, authors: Sequence[str], found: Mapping[bytes, Item], first: int | None = None
    ) -> list[Recent]:
        """Each author's newest posts, from the items in ``found``; only the ``first`` newest
        are split off an item when given. Items missing (or not ours) are rebuilt from the
        store, one query per author, and cached for the next readers."""
        keys = self.keys(authors)
        result: list[Recent] = []
        rebuilt: dict[bytes, bytes] = {}
        expire = self._expiry()
        for author, key in zip(authors, keys, strict=True):
            item = found.get(key)
            recent = None if item is None else _split(item.value, first)
            if recent is None:
                members = self._posts(author)
                rebuilt[key] = _joined(members)
                recent = Recent(members, True)
            result.append(recent)
        if rebuilt:
            self._cache.add_many(rebuilt, expire)
        return result

    def followed(self, following: frozenset[str]) -> list[Recent]:
        """The recent posts of every celebrity in ``following``, on their own round trips
        (``fanout verify`` compares what readers see; the read path fetches these items in its
        own batch)."""
        found = self._cache.gets_many([self.set_key])
        authors = sorted(self.celebrities(found) & following)
        return self.posts(authors, self._cache.gets_many(self.keys(authors)))

    # -- the fan-out consumer --------------------------------------------------------------------

    def refresh(self, authors: Collection[str]) -> None:
        """After a batch stored these celebrities' posts and recorded them as celebrities:
        rewrite their items from the store, and the celebrity set if it lacks one of them."""
        if not authors:
            return
        ordered = sorted(authors)
        expire = self._expiry()
        self._cache.set_many(
            {
                key: _joined(self._posts(author))
                for author, key in zip(ordered, self.keys(ordered), strict=True)
            },
            expire,
        )
        cached = self._cache.get_many([self.set_key]).get(self.set_key)
        names = None if cached is None else _names(cached)
        if names is not None and not names.issuperset(ordered):
            expire = self._expiry()
            self._cache.set_many({self.set_key: _joined(sorted(self._store.celebrities()))}, expire)

    def _posts(self, author: str) -> list[str]:
        return [TimelineEntry.of(p).member for p in self._store.recent_posts([author], self._cap)]


def _joined(members: Sequence[str]) -> bytes:
    return " ".join(members).encode("ascii")


def _split(value: bytes, first: int | None) -> Recent | None:
    """An item's members (the ``first`` newest only, when given); None if it is not ours."""
    try:
        text = value.decode("ascii")
    except UnicodeDecodeError:
        return None
    if not text:
        return Recent([], True)
    if first is None:
        return Recent(text.split(" "), True)
    members = text.split(" ", first)
    if len(members) <= first:
        return Recent(members, True)
    members.pop()  # the rest of the item, unsplit
    return Recent(members, False)
