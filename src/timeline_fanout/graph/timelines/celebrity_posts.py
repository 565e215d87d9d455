"""Celebrities' recent posts, cached, so that a timeline read makes no edge-store query.

Celebrities are never fanned out (consumers/fanout_apply.py): every reader merges their recent
posts into its timeline. Asking the edge store for them (and for who is a celebrity) on every
read put two store queries on the hot path of every read. Instead two kinds of memcached item
hold what the store would answer:

- ``{ns}|cp|{author}``: the author's newest ``cap`` posts as timeline members, newest first,
  separated by spaces;
- ``{ns}|celebrities|{n}``: the celebrities, separated by spaces, in 16 copies (a reader asks
  the one its id hashes to; the consumer's refresh writes them all).

They are cached answers, not token lists: written whole (SET), never appended to, rebuilt from
the store by a reader that finds one missing (ADD, so a reader's rebuild never replaces a
consumer's refresh), and they expire. The fan-out consumer refreshes an author's item in the
batch that stores a celebrity's post, after the store write, and the celebrity set when that
batch records a celebrity the cached set lacks: a follower normally sees the post as soon as the
batch is applied, as with a fanned-out post.

**Staleness bound.** Refreshes can still land out of order (a zombie or a replay racing the live
consumer), and a reader's rebuild can read the store just before a new celebrity is recorded.
So every item expires ``ttl_s`` after its store read *started*: the writer takes a deadline on
its own monotonic clock before the read and writes what is left of it, rounded up to whole
seconds, as a relative expiry (an item whose read took longer is not written). Only durations
are used, so neither the writer's wall clock nor memcached's matters (an absolute expiry would
have stretched the bound by any skew between them). Rounding up adds under a second, and
memcached's clock, which counts whole seconds, under another: an item present at time T was
built from a store read that started after T - ttl_s - 2 s, and a post (or a new celebrity)
committed to the store at time t is in every item a read can find from t + ttl_s + 2 s on.
Nothing extends an item's life.

The celebrity set is one item: past memcached's item size (about 16k celebrities of 64-character
ids at the default 1 MiB) it cannot be cached, readers ask the store on every read, and a
warning says so once per process (raise memcached's ``-I``).
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Collection, Mapping, Sequence
from typing import NamedTuple

from timeline_fanout.graph.model.edges import PostsAndCelebrities
from timeline_fanout.graph.model.fresh import SYSTEM, Fresh
from timeline_fanout.graph.model.keys import KeySpace
from timeline_fanout.graph.timelines.entries import TimelineEntry
from timeline_fanout.graph.timelines.plan import Plan, blocking
from timeline_fanout.memcache import Item, Outcome
from timeline_fanout.memcache.interface import Cache

DEFAULT_TTL_S = 5
log = logging.getLogger("fanout.celebrities")


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
        cache: Cache,
        store: PostsAndCelebrities,
        keys: KeySpace,
        cap: int,
        ttl_s: int = DEFAULT_TTL_S,
        fresh: Fresh = SYSTEM,
    ) -> None:
        """``fresh``: the monotonic clock items' deadlines are read from
        (graph/model/fresh.py)."""
        self._cache = cache
        self._fills = cache.fills()  # best-effort: a key moving is answered refused
        self._store = store
        self._keys = keys
        self._cap = cap
        self.ttl_s = ttl_s
        self._fresh = fresh
        self.set_keys = keys.copies("celebrities")
        self._warned_too_large = False

    def set_key(self, reader: str) -> bytes:
        """The copy of the celebrity set ``reader``'s first multi-GET asks (one of 16: no key
        on every read); the consumer's refresh writes them all."""
        return self._keys.celebrities_key(reader)

    def keys(self, authors: Sequence[str]) -> list[bytes]:
        return self._keys.celebrity_posts_keys(authors)

    def _expiry(self) -> float:
        """Taken before the store read an item is built from (see the staleness bound): a
        deadline on this process's monotonic clock."""
        return self._fresh.monotonic() + self.ttl_s

    def _write(self, add: bool, values: Mapping[bytes, bytes], deadline: float) -> None:
        """ADD (a reader's rebuild) or SET (the consumer's refresh) with the time left before
        ``deadline``, rounded up to whole seconds, as a relative expiry; nothing if none is left
        (an expiry of 0 would mean never)."""
        left = deadline - self._fresh.monotonic()
        if left <= 0 or not values:
            return
        # A reader's rebuild of items moving now is refused (rebuilt after the move); the
        # consumer's refresh raises ``KeysMoving`` and is made again after the move.
        write = self._fills.add_many if add else self._cache.set_many
        outcomes = write(values, math.ceil(left))
        too_large = [k for k in self.set_keys if outcomes.get(k) is Outcome.TOO_LARGE]
        if too_large and not self._warned_too_large:
            self._warned_too_large = True
            log.warning(
                "the celebrity set (%d bytes) is over memcached's item size: it is not cached "
                "and every timeline read asks the edge store for it; raise memcached's -I",
                len(values[too_large[0]]),
            )

    # -- reads -----------------------------------------------------------------------------------

    def _cached_set(self, reader: str, found: Mapping[bytes, Item]) -> frozenset[str] | None:
        """The celebrity set from ``reader``'s copy in ``found``; None if absent or not ours."""
        item = found.get(self.set_key(reader))
        return None if item is None else _names(item.value)

    def _cached_posts(
        self, authors: Sequence[str], found: Mapping[bytes, Item], first: int | None
    ) -> list[Recent | None]:
        """Each author's posts from their item in ``found``; None where absent or not ours."""
        return [
            None if (item := found.get(key)) is None else _split(item.value, first)
            for key in self.keys(authors)
        ]

    def celebrity_set(self, reader: str, found: Mapping[bytes, Item]) -> Plan[frozenset[str]]:
        """``celebrities`` as a plan's step (graph/timelines/plan.py): a blocking step only
        when ``found`` lacks ``reader``'s copy."""
        names = self._cached_set(reader, found)
        if names is None:
            names = yield from blocking(
                "the celebrity set", lambda: self.celebrities(reader, found)
            )
        return names

    def celebrities(self, reader: str, found: Mapping[bytes, Item]) -> frozenset[str]:
        """The celebrity set from ``reader``'s copy in ``found`` (a reader's multi-GET), else
        from the store, cached in that copy for the next readers (unless its server is
        unavailable)."""
        names = self._cached_set(reader, found)
        if names is not None:
            return names
        key = self.set_key(reader)
        expire = self._expiry()
        names = frozenset(self._store.celebrities())
        if self._cache.available([key])[0]:
            self._write(True, {key: _joined(sorted(names))}, expire)
        return names

    def recent(
        self, authors: Sequence[str], found: Mapping[bytes, Item], first: int | None = None
    ) -> Plan[list[Recent]]:
        """``posts`` as a plan's step (graph/timelines/plan.py): a blocking step only when an
        item is missing from ``found`` or not ours."""
        cached = self._cached_posts(authors, found, first)
        if None in cached:
            return (
                yield from blocking("celebrity posts", lambda: self.posts(authors, found, first))
            )
        return [recent for recent in cached if recent is not None]

    def dropping(self, authors: Sequence[str]) -> Plan[None]:
        """``drop`` as a plan's step."""
        if authors:
            yield from blocking("dropping celebrity posts", lambda: self.drop(authors))

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
        cached = self._cached_posts(authors, found, first)
        for author, key, recent in zip(authors, keys, cached, strict=True):
            if recent is None:
                members = self._posts(author)
                rebuilt[key] = _joined(members)
                recent = Recent(members, True)
            result.append(recent)
        self._write(True, rebuilt, expire)
        return result

    def followed(self, following: frozenset[str]) -> list[Recent]:
        """The recent posts of every celebrity in ``following``, on their own round trips
        (``fanout verify`` compares what readers see; the read path fetches these items in its
        own batch)."""
        reader = ""  # any copy will do: each holds the whole set
        found = self._cache.gets_many([self.set_key(reader)])
        authors = sorted(self.celebrities(reader, found) & following)
        return self.posts(authors, self._cache.gets_many(self.keys(authors)))

    def drop(self, authors: Sequence[str]) -> None:
        """Deletes these authors' items (one held a member not of our form): the next reader
        rebuilds them from the store (those moving between servers meanwhile are not deleted:
        the move leaves their copy behind, and the next reader reads the store)."""
        if authors:
            self._fills.delete_many(self.keys(authors))

    # -- the fan-out consumer --------------------------------------------------------------------

    def refresh(self, authors: Collection[str]) -> None:
        """After a batch stored these celebrities' posts and recorded them as celebrities:
        rewrite their items from the store, and every copy of the celebrity set if a cached
        one lacks one of them."""
        if not authors:
            return
        ordered = sorted(authors)
        expire = self._expiry()
        self._write(
            False,
            {
                key: _joined(self._posts(author))
                for author, key in zip(ordered, self.keys(ordered), strict=True)
            },
            expire,
        )
        cached = self._cache.get_many(self.set_keys).values()
        if any((names := _names(v)) is None or not names.issuperset(ordered) for v in cached):
            expire = self._expiry()
            joined = _joined(sorted(self._store.celebrities()))
            self._write(False, dict.fromkeys(self.set_keys, joined), expire)

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
