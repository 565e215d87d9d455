"""What every cached token list shares: settings, stats, the read and write retry loops, rebuilds
through the fence, invalidation, the dirtiness rule and write sampling.

A ``ListLayout`` (graph/lists/sharded.py: follower and following lists; graph/lists/capped.py:
home timelines) supplies how a list is claimed, committed, read and appended to, on a
``ListContext`` it shares with the ``TokenLists`` over it: the layout never drives retries, waits
or rebuilds, and ``TokenLists`` never touches a layout's keys beyond its head. The fence itself
(claim, commit, invalidate) and the argument for why it is right are in graph/lists/fencing.py; the
token encoding, in which appends commute, in graph/lists/tokens.py.

Every cached item expires: a list's head after ``heal_s`` (±10% so lists built together do not
expire together), its shards after twice that, so a head never names a shard that expired first.
Readers never extend an expiry. Whatever divergence a hole left behind is gone once the head
expires and the next reader rebuilds the list from the store: healing is bounded by ``heal_s``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter
from typing import Generic, NamedTuple, Protocol, TypeVar

from timeline_fanout.graph.lists import fencing
from timeline_fanout.graph.lists.shared_reads import SharedReads
from timeline_fanout.graph.lists.tokens import (
    Change,
    DecodedList,
    MemberSet,
    encode,
    split_tokens,
)
from timeline_fanout.graph.model.edges import Snapshot
from timeline_fanout.graph.model.fresh import SYSTEM, Fresh
from timeline_fanout.graph.model.keys import KeySpace, ListKind, ListRef
from timeline_fanout.memcache.interface import Cache
from timeline_fanout.memcache.wire import KeysMoving

__all__ = [
    "EachAppending",
    "ListContext",
    "ListLayout",
    "ListSettings",
    "ListStats",
    "ListWriteError",
    "MemberSource",
    "Pending",
    "ReadRound",
    "TokenLists",
    "WriteResult",
    "WriteRound",
]

# A NamedTuple's own __new__ is Python code; this makes the same tuple in one C call.
_new = tuple.__new__
_ref_of = attrgetter("ref")
MAX_WRITE_ATTEMPTS = 8
# A reader that finds a list being built by someone else polls its head this many times
# (``ListSettings.build_wait_s`` apart), then reads the store itself rather than wait longer (and
# rather than stampede it).
BUILD_WAIT_ROUNDS = 50


@dataclass
class ReadRound:
    """What one pass over the cache found: the members of every list it could read, the lists
    absent (to build from the source), those another client is building (to wait for), those
    to read again (found broken and dropped), and those with an item on a server that is
    unavailable (to answer from the source, writing nothing)."""

    found: dict[ListRef, MemberSet] = field(default_factory=dict)
    absent: list[ListRef] = field(default_factory=list)
    building: list[ListRef] = field(default_factory=list)
    again: list[ListRef] = field(default_factory=list)
    unavailable: list[ListRef] = field(default_factory=list)


class MemberSource(Protocol):
    """The source of truth a list is rebuilt from (the edge store)."""

    def snapshot(self, ref: ListRef) -> Snapshot: ...


class ListWriteError(RuntimeError):
    """A batch of appends could not be applied; the caller retries the batch."""


@dataclass(frozen=True, slots=True)
class ListSettings:
    shard_bytes: int = 64 * 1024
    dirty_ratio: float = 0.5
    dirty_min: int = 64
    compact_write_prob: float = 0.01
    namespace: str = "tf"
    # Capped lists (timelines) keep only their greatest members when compacted.
    max_members: int | None = None
    heal_s: int = 3600
    # A rebuild's claim lives this long unless committed: the bound on how long a crashed
    # rebuild blocks anybody (writers never wait; readers wait a little, then read the store).
    lease_s: int = 60
    # How long a reader waits before reading again the head of a list another client builds.
    build_wait_s: float = 0.01


@dataclass(slots=True)
class ListStats:
    """What the list layer did; consumers export these as metrics."""

    appends: int = 0  # tokens appended to a cached list (one per list per write)
    skipped_absent: int = 0  # writes to lists not in the cache: the store has them
    rollovers: int = 0
    rebuilds: int = 0
    rebuilds_lost: int = 0  # claims broken before their commit (an invalidation, an eviction)
    invalidations: int = 0
    compactions: int = 0
    compactions_lost: int = 0
    retries: int = 0
    build_waits: int = 0  # rounds a reader waited for another client's rebuild
    store_reads: int = 0  # reads answered from the store (a build in progress for too long)
    degraded_reads: int = 0  # lists answered from the store: a server of theirs is unavailable
    decodes: int = 0  # lists decoded from items another read brought (not found decoded)


class Delivery(NamedTuple):
    """One post's token for the timelines of ``users``: a fan-out's unit of work, many to a
    wave (``TokenLists.deliver``), each one ``AppendGroup`` of the cache."""

    token: bytes
    users: Sequence[str]


class Pending(NamedTuple):
    """Tokens on their way to one list (a tuple: a write makes one per list, ``_new``)."""

    ref: ListRef
    key: bytes  # the list's head key, validated once: write rounds look it up many times
    tokens: bytes


@dataclass(slots=True)
class WriteRound:
    """What one write round left: the writes to go round again, and those skipped because
    their list is not in the cache (a write never builds a list: its next reader builds it
    from the store, which already holds the write)."""

    again: list[Pending] = field(default_factory=list)
    skipped: list[Pending] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What a write did: how many lists it appended to (one per list per write, as
    ``ListStats.appends``), and the lists it skipped because they were not in the cache (a
    list that one wave of the write skipped and a later one appended to is not skipped)."""

    appended: int
    skipped: frozenset[ListRef]


@dataclass(frozen=True, slots=True)
class ListContext:
    """What a layout works with, shared with the ``TokenLists`` over it: the cache, the
    settings, the key space, the stats both count into, and where generation ids and shard
    names come from."""

    cache: Cache
    settings: ListSettings
    keys: KeySpace
    stats: ListStats
    fresh: Fresh

    def part_expiry(self) -> int:
        """Shards outlive the head that names them (a head lives at most 1.1 x heal_s)."""
        return 2 * self.settings.heal_s + self.settings.lease_s

    def dirty(self, members: int, tokens: int) -> bool:
        """Worth compacting: more dead tokens (removed, superseded, duplicated, or past the
        cap) than ``dirty_min`` and than ``dirty_ratio`` of all tokens."""
        cap = self.settings.max_members
        dead = tokens - (members if cap is None else min(members, cap))
        return dead > self.settings.dirty_min and dead > self.settings.dirty_ratio * tokens

    def is_dirty(self, decoded: DecodedList) -> bool:
        return self.dirty(len(decoded.members), decoded.tokens)


class ListLayout(Protocol):
    """How lists are laid out in the cache. ``TokenLists`` drives the rounds (retries, waits for
    another client's build, rebuilds from the source, reads from the store when a server is
    unavailable); a layout answers one round at a time and keeps the fence's invariants
    (graph/lists/fencing.py) for its own items."""

    def claim(self, gens: Mapping[bytes, bytes]) -> set[bytes]:
        """Claim the heads ``{head key: generation}``; return those this client builds."""
        ...

    def commit(self, builds: Mapping[bytes, tuple[bytes, Snapshot]]) -> set[bytes]:
        """Write each claimed list's snapshot and commit it through the fence; return the
        heads committed."""
        ...

    def read_round(self, refs: list[ListRef]) -> ReadRound:
        """One pass over the cache for ``refs`` (see ``ReadRound``)."""
        ...

    def write_round(self, pending: list[Pending]) -> WriteRound:
        """Append what can be appended; say what goes round again and what was skipped."""
        ...


class EachAppending(ListLayout, Protocol):
    """A layout whose head is the item appended to (capped timelines): a delivery's first round
    is one pipelined APPEND per list, with the command stream built per token, not per list."""

    kind: ListKind  # of the lists delivered to

    def append_each(self, posts: Sequence[Delivery]) -> WriteRound:
        """Append each token to the lists of its users; the refused appends, to settle."""
        ...


L = TypeVar("L", bound=ListLayout, covariant=True)
E = TypeVar("E", bound=EachAppending)
T = TypeVar("T")


class TokenLists(Generic[L]):
    """Cached token lists in one layout: reads (with rebuilds, waits and failover to the
    store), writes (with retry rounds), invalidations and write-sampled compaction."""

    def __init__(
        self,
        layout: Callable[[ListContext], L],
        cache: Cache,
        source: MemberSource,
        settings: ListSettings | None = None,
        rng: random.Random | None = None,
        shared: SharedReads[ListRef, Snapshot] | None = None,
        fresh: Fresh = SYSTEM,
    ) -> None:
        """``layout``: made on this object's ``ListContext`` (``ShardedLayout`` for follower and
        following lists, ``CappedLayout`` for timelines). ``shared``: store reads shared
        with the other threads' lists on the same edge store (graph/lists/shared_reads.py); one
        of its own if None. ``fresh``: the clock and random hex generation ids and shard names
        are made from (graph/model/fresh.py). A reader waiting for another client's build waits
        with ``cache.wait``."""
        self.cache = cache
        self.source = source
        self.shared = shared or SharedReads()
        self.settings = settings or ListSettings()
        self.keys = KeySpace(self.settings.namespace)
        self.stats = ListStats()
        self._rng = rng or random.Random()
        self.context = ListContext(cache, self.settings, self.keys, self.stats, fresh)
        self.layout = layout(self.context)

    # -- keys and expiry ---------------------------------------------------------------------

    def index_key(self, ref: ListRef) -> bytes:
        return self.keys.list_key(ref)

    def index_keys(self, refs: Sequence[ListRef]) -> list[bytes]:
        return self.keys.ref_keys(refs)

    def head_expiry(self) -> int:
        heal = self.settings.heal_s
        return max(1, round(heal * (0.9 + 0.2 * self._rng.random())))

    # -- invalidation and rebuilds -----------------------------------------------------------

    def invalidate(self, refs: Iterable[ListRef]) -> None:
        """Drop lists so the next reader rebuilds them from the store (fenced: see
        graph/lists/fencing.py)."""
        self._invalidate(self.cache, refs)

    def drop(self, refs: Iterable[ListRef]) -> None:
        """A reader's ``invalidate`` of lists it found corrupt or displaced: best effort, so a
        list moving between servers is left where it is (``Cache.fills``): the move leaves it
        behind, and the read after this one reads the store."""
        self._invalidate(self.cache.fills(), refs)

    def _invalidate(self, cache: Cache, refs: Iterable[ListRef]) -> None:
        keys = self.index_keys(list(dict.fromkeys(refs)))
        fencing.invalidate(cache, keys)
        self.stats.invalidations += len(keys)

    def rebuild_many(self, refs: Sequence[ListRef]) -> dict[ListRef, MemberSet | None]:
        """Build absent lists from the store through the fence: the members committed, or None
        where this client did not commit (another client holds the claim, the claim was
        broken, or the list began moving between servers), in which case the caller goes
        round again."""
        unique = list(dict.fromkeys(refs))
        if not unique:
            return {}
        keys = dict(zip(unique, self.index_keys(unique), strict=True))
        gens = {
            ref: fencing.new_generation(self.head_expiry(), self.context.fresh) for ref in unique
        }
        won = self.layout.claim({keys[ref]: gens[ref] for ref in unique})
        mine = [ref for ref in unique if keys[ref] in won]
        snapshots = {ref: self.source.snapshot(ref) for ref in mine}
        # The ring may have moved on since the claims (this process's lease on it ran out
        # while the store was read): lists whose items now move are not committed, and their
        # claims expire on copies only processes at the old version read.
        mine = list(compress(mine, self.cache.available([keys[ref] for ref in mine])))
        committed = self.layout.commit({keys[ref]: (gens[ref], snapshots[ref]) for ref in mine})
        result: dict[ListRef, MemberSet | None] = dict.fromkeys(unique)
        for ref in mine:
            if keys[ref] in committed:
                result[ref] = frozenset(snapshots[ref].members)
                self.stats.rebuilds += 1
            else:
                self.stats.rebuilds_lost += 1
        return result

    # -- reads -------------------------------------------------------------------------------

    def read(self, ref: ListRef) -> MemberSet:
        return self.read_many([ref])[ref]

    def read_many(self, refs: Sequence[ListRef]) -> dict[ListRef, MemberSet]:
        """Every list in one pass per round (multi-GETs with CAS ids, so that a dirty list is
        compacted without another read); absent lists are built from the source. A list that
        another client is building is waited for a little, then read from the store. A list
        with an item on an unavailable server (memcache/trust.py), or moving between servers
        (memcache/ring.py), is answered from the source and nothing is written for it: exact,
        at the cost of a store read."""
        result: dict[ListRef, MemberSet] = {}
        todo = list(dict.fromkeys(refs))
        for attempt in range(BUILD_WAIT_ROUNDS + MAX_WRITE_ATTEMPTS):
            if not todo:
                return result
            usable = self.cache.available(self.index_keys(todo))
            self._from_source([ref for ref, ok in zip(todo, usable, strict=True) if not ok], result)
            todo = list(compress(todo, usable))
            try:
                read = self.layout.read_round(todo)
                result.update(read.found)
                # A server that failed during the round made its lists absent: not built.
                usable = self.cache.available(self.index_keys(read.absent))
                self._from_source(read.unavailable, result)
                self._from_source(
                    [r for r, ok in zip(read.absent, usable, strict=True) if not ok], result
                )
                built = self.rebuild_many(list(compress(read.absent, usable)))
            except KeysMoving:
                # The ring moved on mid-round (this process's lease on it ran out): a
                # compaction or a build was left undone. Round again: lists that move are
                # then answered from the source.
                self.stats.retries += 1
                continue
            result.update({ref: members for ref, members in built.items() if members is not None})
            todo = [ref for ref, members in built.items() if members is None]
            todo += read.again + read.building
            if read.building:
                self.stats.build_waits += 1
                if attempt >= BUILD_WAIT_ROUNDS:
                    break
                self.cache.wait(self.settings.build_wait_s)
            if todo:
                self.stats.retries += 1
        for ref in todo:  # still not readable from the cache: the store is the answer
            result[ref] = self._from_store(ref)
            self.stats.store_reads += 1
        return result

    def _from_source(self, refs: Sequence[ListRef], result: dict[ListRef, MemberSet]) -> None:
        """Lists whose server is unavailable, from the source, with nothing written."""
        for ref in refs:
            result[ref] = self._from_store(ref)
        self.stats.degraded_reads += len(refs)

    def _from_store(self, ref: ListRef) -> MemberSet:
        """``ref``'s members from the source, by a query shared with concurrent readers of the
        same list (no herd on the store while its server is down)."""
        source = self.source
        return frozenset(self.shared.read(ref, lambda: source.snapshot(ref)).members)

    def cached_many(self, refs: Sequence[ListRef]) -> dict[ListRef, MemberSet]:
        """What the cache holds for each list that is cached and not being built; nothing is
        rebuilt (anti-entropy compares this with the store)."""
        return self.layout.read_round(list(dict.fromkeys(refs))).found

    # -- writes ------------------------------------------------------------------------------

    def apply(self, changes: Mapping[ListRef, Sequence[Change]]) -> WriteResult:
        """Append the tokens of these changes to many lists. The edge store must already
        hold these changes."""
        return self.append_tokens({ref: encode(ops) for ref, ops in changes.items() if ops})

    def append_tokens(self, tokens: Mapping[ListRef, bytes]) -> WriteResult:
        """``apply`` for tokens already encoded."""
        refs = [ref for ref, data in tokens.items() if data]
        keys = self.index_keys(refs)
        # A list's tokens larger than a shard go in several waves (tokens commute), so no
        # single write can pass the server's item size limit.
        limit = self.settings.shard_bytes
        pieces = [
            [data] if len(data) <= limit else split_tokens(data, limit)
            for data in map(tokens.__getitem__, refs)
        ]
        write = _Write(self)
        for wave in range(max(map(len, pieces), default=0)):
            write.settle(
                [
                    _new(Pending, (ref, key, p[wave]))
                    for ref, key, p in zip(refs, keys, pieces, strict=True)
                    if wave < len(p)
                ]
            )
        result = write.done()
        self._compact_written(self._sample(list(tokens)), result.skipped)
        return result

    def deliver(self: TokenLists[E], posts: Sequence[Delivery]) -> WriteResult:
        """Append each token to the lists of its users (a post to its followers' timelines):
        the hot path of a fan-out, the layout's ``append_each`` first, then what it refused
        (list absent, or full) through the same retry rounds as ``append_tokens``."""
        write = _Write(self)
        write.settle_after(self.layout.append_each(posts))
        result = write.done()
        kind = self.layout.kind
        sampled = [ListRef(kind, user) for _, users in posts for user in self._sample(users)]
        self._compact_written(sampled, result.skipped)
        return result

    def _sample(self, written: Sequence[T]) -> list[T]:
        """A random ``compact_write_prob`` share of what a write touched (rounded at random,
        so small writes are sampled too)."""
        share = self.settings.compact_write_prob * len(written)
        return self._rng.sample(written, min(len(written), int(share + self._rng.random())))

    def _compact_written(self, refs: Iterable[ListRef], skipped: frozenset[ListRef]) -> None:
        """Read, and so compact if dirty, lists just written to; not those the write skipped:
        they are not in the cache, and a read would build them."""
        chosen = [ref for ref in refs if ref not in skipped]
        if chosen:
            self.read_many(chosen)


class _Write:
    """One write's rounds and skips. A list skipped because its server left one of the write's
    exchanges unanswered (a refused APPEND's existence check, say) was not absent but missed
    this write, and its server must never serve it again (memcache/trust.py): ``done`` reports
    the skips to the cache."""

    def __init__(self, lists: TokenLists[L]) -> None:
        self._lists = lists
        self._since = lists.cache.checkpoint()
        self._appends = lists.stats.appends
        self._skipped: set[ListRef] = set()
        # Lists a round appended to: a list skipped in one wave (absent) may be built before
        # the next and take that wave's tokens, and then it was written.
        self._written: set[ListRef] = set()

    def settle(self, pending: list[Pending]) -> None:
        """Rounds until nothing is left to go round again (at most ``MAX_WRITE_ATTEMPTS``)."""
        for attempt in range(MAX_WRITE_ATTEMPTS):
            if not pending:
                return
            if attempt:
                self._lists.stats.retries += 1
            round_ = self._lists.layout.write_round(pending)
            left = set(map(_ref_of, round_.again)).union(map(_ref_of, round_.skipped))
            self._written |= set(map(_ref_of, pending)) - left
            pending = self._record(round_)
        raise ListWriteError(f"could not append to {len(pending)} lists after retries")

    def settle_after(self, first: WriteRound) -> None:
        """``settle`` what a first round (``EachAppending.append_each``) left."""
        self.settle(self._record(first))

    def _record(self, round_: WriteRound) -> list[Pending]:
        self._lists.stats.skipped_absent += len(round_.skipped)
        self._skipped.update(item.ref for item in round_.skipped)
        return round_.again

    def done(self) -> WriteResult:
        """Every skip goes to ``missed`` (a wave skipped on an unanswered exchange missed its
        tokens even if a later wave was appended); the result's skipped lists are those no
        wave appended to."""
        lists = self._lists
        lists.cache.missed(lists.index_keys(list(self._skipped)), self._since)
        skipped = frozenset(self._skipped - self._written)
        return WriteResult(lists.stats.appends - self._appends, skipped)
