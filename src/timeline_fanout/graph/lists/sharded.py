"""Follower and following lists: sharded token sets behind an index item (the Membase
manual's large lists).

Layout of one list (``P`` = ``{ns}|{fl|fg}|{user}``, see graph/model/keys.py)::

    P              index:  "{gen} +j +0 +1 +7f3a0c "   the head: committed through the fence
    P|{gen}|{s}    shard:  "+a#1f +b#20 -a#31 "        ADDed, then grown with APPEND
    P|{gen}|{s}|n  bytes reserved in shard s            INCR, tells a writer when to roll over

A rebuild claims the head with ``"{gen}~ +j "`` (journal shard ``j``, where writes land during
the build), writes shards ``0..k`` from the store and commits ``"{gen} +j +0 .. +k "``
(graph/lists/fencing.py). Writers append to the newest shard named by the head.

**Rollover** is fenced too: a writer ADDs a shard under a fresh random name holding its tokens,
then CASes the index to name it. A writer whose view of the index is stale loses the CAS and
goes round; a shard name is never reused, so a shard that was evicted can never be re-ADDed
empty behind a head that still names it (that would lose its tokens with every named shard
present). A head always names shards that were created, so a missing one is always an
eviction, answered by dropping the list (only if its head is unchanged) and rebuilding it.

**Compaction** rewrites shards with CAS keeping only deciding tokens (graph/lists/tokens.py) and
shrinks the newest shard's counter by what it removed, so churn among a few members never rolls
a list over; a list whose shards hold far less than they could is dropped and rebuilt compact.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from timeline_fanout.graph.lists import fencing
from timeline_fanout.graph.lists.decoded import DecodedLists
from timeline_fanout.graph.lists.fencing import Index
from timeline_fanout.graph.lists.token_lists import (
    ListContext,
    Pending,
    ReadRound,
    TokenLists,
    WriteRound,
)
from timeline_fanout.graph.lists.tokens import (
    CorruptList,
    MemberSet,
    compact_shards,
    decode_ids,
    encode_members,
    split_tokens,
)
from timeline_fanout.graph.model.edges import Snapshot
from timeline_fanout.graph.model.keys import ListRef, counter_key, shard_key
from timeline_fanout.memcache.cluster import Item, Outcome, keep_ttl

# A NamedTuple's own __new__ is Python code; this makes the same tuple in one C call.
_new = tuple.__new__
# A list whose shards could hold its live tokens in half as many is rebuilt compact.
MIN_SHARDS_TO_REPACK = 4


class _Located(NamedTuple):
    """A tuple: a write round makes one per list (``_new``, in C)."""

    item: Pending
    parsed: Index  # the head, parsed
    head: Item  # the index as read: its CAS id fences a rollover
    shard: bytes  # the newest shard's key
    counter: bytes  # its counter's key


@dataclass(slots=True)
class _Plan:
    appends: dict[bytes, bytes] = field(default_factory=dict)
    rollovers: list[_Located] = field(default_factory=list)


class _Broken(NamedTuple):
    item: Pending
    head: Item  # as read: a newer head is never dropped


@dataclass(slots=True)
class _Retries:
    """What a step of a write round leaves: writes to go round again, and writes whose lists
    are to be dropped (``break_list``). Such a write is skipped only once its list is gone (the
    store has the write; the next reader rebuilds the list with it): if the head changed since
    it was read (a rebuild committed, a rollover named a shard), the drop is refused and the
    write goes round against the new head, which may lack it."""

    again: list[Pending] = field(default_factory=list)
    broken: dict[ListRef, _Broken] = field(default_factory=dict)
    skipped: list[Pending] = field(default_factory=list)

    def break_list(self, item: Pending, head: Item) -> None:
        self.broken[item.ref] = _Broken(item, head)

    def add(self, other: _Retries) -> None:
        self.again += other.again
        self.broken.update(other.broken)
        self.skipped += other.skipped


class ShardedLayout:
    """Sharded lists (followers, following): an index item and shards behind it
    (``ListLayout``)."""

    decoded = DecodedLists()  # per process: every reader of a list decodes the same bytes

    def __init__(self, context: ListContext) -> None:
        self.context = context
        self.cache = context.cache
        self.settings = context.settings
        self.stats = context.stats

    # -- rebuilds ----------------------------------------------------------------------------

    def claim(self, gens: Mapping[bytes, bytes]) -> set[bytes]:
        """The journal shard (and its counter) first, then the marker that names it."""
        parts: dict[bytes, bytes] = {}
        for key, gen in gens.items():
            journal = shard_key(key, gen, fencing.JOURNAL)
            parts[journal] = b""
            parts[counter_key(journal)] = b"0"
        self.cache.add_many(parts, expire=self.context.part_expiry())
        won = fencing.claim(
            self.cache, {k: fencing.index_marker(g) for k, g in gens.items()}, self.settings.lease_s
        )
        self.cache.delete_many(
            k for key, gen in gens.items() if key not in won for k in self._journal(key, gen)
        )
        return won

    @staticmethod
    def _journal(key: bytes, gen: bytes) -> tuple[bytes, bytes]:
        journal = shard_key(key, gen, fencing.JOURNAL)
        return journal, counter_key(journal)

    def commit(self, builds: Mapping[bytes, tuple[bytes, Snapshot]]) -> set[bytes]:
        """Data shards ``0..k`` and the newest one's counter, then the index CAS."""
        parts: dict[bytes, dict[bytes, bytes]] = {}
        heads: dict[bytes, bytes] = {}
        for key, (gen, snapshot) in builds.items():
            chunks = split_tokens(
                encode_members(snapshot.members, snapshot.positions), self.settings.shard_bytes
            )
            names = [b"%d" % i for i in range(len(chunks))]
            mine = {shard_key(key, gen, n): c for n, c in zip(names, chunks, strict=True)}
            mine[counter_key(shard_key(key, gen, names[-1]))] = b"%d" % len(chunks[-1])
            parts[key] = mine
            heads[key] = Index(gen, (fencing.JOURNAL, *names), False).encode()
        added = self.cache.add_many(
            {k: v for mine in parts.values() for k, v in mine.items()},
            expire=self.context.part_expiry(),
        )
        complete = [key for key, mine in parts.items() if all(added[k].ok for k in mine)]

        def finishing(key: bytes) -> Callable[[bytes], bytes | None]:
            marker = fencing.index_marker(builds[key][0])
            return lambda current: heads[key] if current == marker else None

        committed = fencing.commit(
            self.cache,
            {key: finishing(key) for key in complete},
            {key: fencing.deadline(builds[key][0]) for key in complete},
        )
        self.cache.delete_many(
            k
            for key, mine in parts.items()
            if key not in committed
            for k in [*mine, *self._journal(key, builds[key][0])]
        )
        return committed

    # -- reads -------------------------------------------------------------------------------

    def read_round(self, refs: list[ListRef]) -> ReadRound:
        keys = dict(zip(refs, self.context.keys.ref_keys(refs), strict=True))
        heads = self.cache.gets_many(keys.values())
        read = ReadRound()
        broken: dict[ListRef, Item] = {}
        indexes: dict[ListRef, Index] = {}
        for ref in refs:
            head = heads.get(keys[ref])
            if head is None:
                read.absent.append(ref)
                continue
            try:
                idx = Index.parse(head.value)
            except CorruptList:
                broken[ref] = head
                continue
            if idx.building:
                read.building.append(ref)
            else:
                indexes[ref] = idx
        shard_keys = {ref: self._shards_of(keys[ref], idx) for ref, idx in indexes.items()}
        every = [k for ks in shard_keys.values() for k in ks]
        usable = dict(zip(every, self.cache.available(every), strict=True))
        for ref in [ref for ref, ks in shard_keys.items() if not all(map(usable.get, ks))]:
            read.unavailable.append(ref)  # a shard's server is unavailable: not broken
            del shard_keys[ref]
        shards = self.cache.gets_many([k for ks in shard_keys.values() for k in ks])
        for ref, ks in shard_keys.items():
            if any(k not in shards for k in ks):
                broken[ref] = heads[keys[ref]]
                continue
            try:
                decoded = decode_ids(shards[k].value for k in ks)
            except CorruptList:
                broken[ref] = heads[keys[ref]]
                continue
            read.found[ref] = decoded.members
            if self.context.is_dirty(decoded):
                self._compact(ks, [shards[k] for k in ks])
            if self._wasteful(ks, [shards[k] for k in ks], decoded.members):
                broken[ref] = heads[keys[ref]]  # read fine; dropped so the next read repacks it
        self._drop(keys, broken)
        read.again = [ref for ref in broken if ref not in read.found]
        return read

    @staticmethod
    def _shards_of(key: bytes, idx: Index) -> list[bytes]:
        return [shard_key(key, idx.gen, s) for s in idx.shards]

    def named_shards(self, key: bytes, head: bytes) -> list[bytes]:
        """The shard keys a committed head names (none for a building or corrupt one: such a
        list is left to ``read_many``)."""
        try:
            idx = Index.parse(head)
        except CorruptList:
            return []
        return [] if idx.building else self._shards_of(key, idx)

    def fetched(self, key: bytes, found: Mapping[bytes, Item]) -> MemberSet | None:
        """A list's members from items someone else's multi-GET brought (its head and the
        shards the head names), when that is a committed, complete, clean list; None for
        anything else (absent, being built, a shard missing, corrupt, dirty, wasteful), which
        ``read_many`` handles as always (rebuild, wait, drop, compact). Bytes decoded before
        are not decoded again (graph/lists/decoded.py).

        The caller must have read each shard no earlier than a moment at which the head held
        the value in ``found`` (after it, as ``read_many`` does, or in the same batch with a
        head value it had seen before: graph/timelines/fetch.py says why that is the same).
        ``key``: the list's head key."""
        head = found.get(key)
        if head is None:
            return None
        keys = self.named_shards(key, head.value)
        shards = [found.get(k) for k in keys]
        if not keys or None in shards:
            return None
        present = [s for s in shards if s is not None]
        values = [s.value for s in present]
        if (members := self.decoded.get(key, values)) is not None:
            return members
        try:
            decoded = decode_ids(values)
        except CorruptList:
            return None
        self.stats.decodes += 1
        if self.context.is_dirty(decoded) or self._wasteful(keys, present, decoded.members):
            return None
        self.decoded.put(key, values, decoded.members)
        return decoded.members

    def _drop(self, keys: Mapping[ListRef, bytes], broken: Mapping[ListRef, Item]) -> None:
        fencing.drop_if_unchanged(self.cache, {keys[ref]: head.cas for ref, head in broken.items()})
        self.stats.invalidations += len(broken)

    def _drop_or_retry(self, left: _Retries) -> WriteRound:
        """Drop the lists a write round found broken, each if its head is unchanged, and skip
        their writes; a write whose list's head changed since it was read goes round again."""
        outcomes = fencing.drop_if_unchanged(
            self.cache, {b.item.key: b.head.cas for b in left.broken.values()}
        )
        result = WriteRound(left.again, left.skipped)
        for item, _ in left.broken.values():
            if outcomes[item.key] is Outcome.EXISTS:
                result.again.append(item)
            else:
                result.skipped.append(item)
                self.stats.invalidations += 1
        return result

    def _wasteful(self, keys: list[bytes], shards: list[Item], members: MemberSet) -> bool:
        if len(keys) < MIN_SHARDS_TO_REPACK:
            return False
        total = sum(len(s.value) for s in shards)
        tokens = sum(s.value.count(b" ") for s in shards)
        live = total * len(members) // max(tokens, 1)
        return len(keys) > 2 * (live // self.settings.shard_bytes + 1)

    # -- compaction --------------------------------------------------------------------------

    def _compact(self, keys: list[bytes], shards: list[Item]) -> None:
        """Rewrite shards in order with CAS; give up at the first lost race (see
        compact_shards; counted in ``stats``). The newest shard's counter shrinks by what its
        rewrite removed."""
        rewritten = compact_shards([s.value for s in shards], self.settings.max_members)
        for key, old, new in zip(keys, shards, rewritten, strict=True):
            if new == old.value:
                continue
            if self.cache.cas(key, new, old.cas, keep_ttl(old.ttl)) is not Outcome.STORED:
                self.stats.compactions_lost += 1
                return
        freed = len(shards[-1].value) - len(rewritten[-1])
        if freed > 0:
            self.cache.decr_many({counter_key(keys[-1]): freed})
        self.stats.compactions += 1

    # -- writes ------------------------------------------------------------------------------

    def write_round(self, pending: list[Pending]) -> WriteRound:
        left = _Retries()
        heads = self.cache.gets_many([p.key for p in pending])
        located: list[_Located] = []
        for item in pending:
            head = heads.get(item.key)
            if head is None:
                left.skipped.append(item)
                continue
            try:
                idx = Index.parse(head.value)
            except CorruptList:
                left.break_list(item, head)  # the next reader rebuilds it, write included
                continue
            newest = shard_key(item.key, idx.gen, idx.shards[-1])
            located.append(_new(_Located, (item, idx, head, newest, counter_key(newest))))
        located = self._reachable(located, left)

        sizes = self.cache.incr_many({at.counter: len(at.item.tokens) for at in located})
        plan = _Plan()
        uncounted: list[_Located] = []
        for at in located:
            size = sizes[at.counter]
            if size is None:
                uncounted.append(at)
            elif size > self.settings.shard_bytes and not at.parsed.building:
                plan.rollovers.append(at)
            else:
                plan.appends[at.shard] = at.item.tokens
        left.add(self._recount(uncounted))

        by_shard = {at.shard: at for at in located}
        outcomes = self.cache.append_many(plan.appends)
        refused = [k for k, outcome in outcomes.items() if outcome is not Outcome.STORED]
        self.stats.appends += len(outcomes) - len(refused)
        present = self.cache.exists_many([k for k in refused if outcomes[k] is Outcome.NOT_STORED])
        for key in refused:
            at = by_shard[key]
            full = outcomes[key] is Outcome.TOO_LARGE or present.get(key)
            if full and not at.parsed.building:
                plan.rollovers.append(at)  # the shard is full: open a new one
            else:  # evicted (the list is incomplete), or a build's journal full: drop the
                left.break_list(at.item, at.head)  # list, writers never wait for a build
        left.add(self._roll_over(plan.rollovers))
        return self._drop_or_retry(left)

    def _reachable(self, located: list[_Located], left: _Retries) -> list[_Located]:
        """The writes whose newest shard and its counter are on usable servers. The others'
        lists are dropped (their heads, on a usable server, are deleted if unchanged: the next
        reader rebuilds them from the store, this write included) and the write skipped; the
        unusable servers are revoked, since they missed the write (memcache/trust.py)."""
        keys = [k for at in located for k in (at.shard, at.counter)]
        usable = self.cache.available(keys)
        pairs = zip(usable[::2], usable[1::2], strict=True)
        ok = [a and b for a, b in pairs]
        if all(ok):
            return located
        unusable = [k for k, fine in zip(keys, usable, strict=True) if not fine]
        self.cache.missed(unusable, self.cache.checkpoint())
        for at, fine in zip(located, ok, strict=True):
            if not fine:
                left.break_list(at.item, at.head)
        return [at for at, fine in zip(located, ok, strict=True) if fine]

    def _recount(self, uncounted: list[_Located]) -> _Retries:
        """Counter evicted: seed it from the shard's real length and go round again. A shard
        gone with its counter is an eviction like any other: the list is dropped (if its head
        is unchanged) and the write skipped, never retried on a shard that cannot come back."""
        left = _Retries()
        if not uncounted:
            return left
        present = self.cache.get_many([at.shard for at in uncounted])
        seeds = {counter_key(k): b"%d" % len(v) for k, v in present.items()}
        self.cache.add_many(seeds, expire=self.context.part_expiry())
        for at in uncounted:
            if at.shard not in present:
                left.break_list(at.item, at.head)
            else:
                left.again.append(at.item)
        return left

    def _roll_over(self, rollovers: list[_Located]) -> _Retries:
        """A shard under a fresh name holding the tokens, then the index CAS that names it.
        While a list is being built its journal takes every write (the commit names it)."""
        left = _Retries()
        if not rollovers:
            return left
        named: dict[bytes, tuple[_Located, bytes]] = {}
        for at in rollovers:
            name = self.context.fresh.hex(3)
            named[shard_key(at.item.key, at.parsed.gen, name)] = (at, name)
        added = self.cache.add_many(
            {k: at.item.tokens for k, (at, _) in named.items()}, expire=self.context.part_expiry()
        )
        self.cache.add_many(
            {counter_key(k): b"%d" % len(named[k][0].item.tokens) for k in named},
            expire=self.context.part_expiry(),
        )
        swaps: dict[bytes, tuple[bytes, bytes]] = {}
        shard_of: dict[bytes, bytes] = {}
        for key, (at, name) in named.items():
            if added[key] is Outcome.TOO_LARGE:  # tokens past the item limit: the store has them
                left.break_list(at.item, at.head)
                continue
            if not added[key].ok:  # a name collision: try another
                left.again.append(at.item)
                continue
            swaps[at.item.key] = (at.head.value + b"+%s " % name, at.head.cas)
            shard_of[at.item.key] = key
        # The head keeps its absolute deadline (its generation names it): a rollover, however
        # late its CAS, never extends a list's life (healing is bounded by it).
        ttls = {k: fencing.deadline(named[shard_of[k]][0].parsed.gen) for k in swaps}
        outcomes = self.cache.cas_many(swaps, ttls)
        orphans: list[bytes] = []
        for head_key, outcome in outcomes.items():
            at, _ = named[shard_of[head_key]]
            if outcome is Outcome.STORED:
                self.stats.rollovers += 1
                self.stats.appends += 1
                continue
            orphans += [shard_of[head_key], counter_key(shard_of[head_key])]
            if outcome is Outcome.EXISTS:  # the index changed under a stale view: go round
                left.again.append(at.item)
            elif outcome is Outcome.NOT_FOUND:  # the list is gone: the store has the write
                left.skipped.append(at.item)
            else:  # the index itself is full: drop the list, a rebuild packs it
                left.break_list(at.item, at.head)
        if orphans:
            self.cache.delete_many(orphans)
        return left


ShardedLists = TokenLists[ShardedLayout]
