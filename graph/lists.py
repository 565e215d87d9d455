"""Follower and following lists in memcached: sharded append-only token sets.

Layout of one list (``P`` = ``{ns}:{fl|fg}:{user}``)::

    P            index:   "{gen} +0 +1 +2 "      created with ADD, grown with APPEND
    P:{gen}:N    shard N: "+a +b -a "            created with ADD, grown with APPEND
    P:{gen}:N:n  bytes reserved in shard N       INCR, tells a writer when to roll over

The index is the commit point. Rebuilding a list picks a fresh generation so that it never
collides with shards of an older generation that a slow writer may still append to.

Correctness rests on one ordering rule: **a writer updates the edge store before it reads a
list's index.** Any rebuild starts after the index it replaces was gone, so it reads the store
after every writer that used the old index had written the store, and a token appended to an
orphaned shard of the old generation is already in the rebuilt list. That is what lets every
inconsistency (missing index, missing shard, missing counter, corrupt bytes) be answered the same
way: drop the index and rebuild from the store, never ADD a list that holds only the new token.
"""

from __future__ import annotations

import abc
import enum
import functools
import random
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, TypeVar

from graph.cache import MemcacheCluster
from graph.tokens import CorruptList, DecodedList, compact_shards, decode, encode, encode_members
from schemas import all_valid_ids, is_valid_id

MAX_WRITE_ATTEMPTS = 8
# A rebuild holds this lease (an ADDed marker item) so that a herd of readers and writers that
# all find a list missing waits for one rebuild instead of each querying the store.
REBUILD_LEASE_S = 10
REBUILD_WAIT_S = 2.0
# Remembered index parses: ~45 MB when full (measured with tracemalloc; raw bytes, parsed tuple).
PARSED_INDEXES = 1 << 16
T = TypeVar("T")


class ListKind(enum.Enum):
    FOLLOWERS = "fl"
    FOLLOWING = "fg"
    TIMELINE = "tl"

    # Members are singletons: identity hashing, in C (Enum's own __hash__ is Python code, and
    # list references are hashed several times per event on the ingest path).
    __hash__ = object.__hash__


class ListRef(NamedTuple):
    """One list: a tuple, so hashing and comparing it in the hot dicts runs in C."""

    kind: ListKind
    user: str


class MemberSource(Protocol):
    """The source of truth a list is rebuilt from (the edge store)."""

    def all_members(self, ref: ListRef) -> list[str]: ...


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


@dataclass(slots=True)
class ListStats:
    """What the list layer did; consumers export these as metrics."""

    appends: int = 0
    rollovers: int = 0
    rebuilds: int = 0
    invalidations: int = 0
    compactions: int = 0
    compactions_lost: int = 0
    retries: int = 0
    skipped_absent: int = 0


class Index(NamedTuple):
    """A list's index item, parsed. Every write reads the index of each list it appends to, and
    a hot list's index changes only when it rolls over or is rebuilt: parses are remembered by
    the raw bytes (a pure function of them), which takes ~1/8 of ingest time off the profile."""

    gen: str
    shards: tuple[int, ...]

    @staticmethod
    @functools.lru_cache(maxsize=PARSED_INDEXES)
    def parse(raw: bytes) -> Index:
        parts = raw.split()
        if not parts or not parts[0].isalnum() or raw.count(b" +") != len(parts) - 1:
            raise CorruptList(f"bad index {raw[:70]!r}")
        try:  # every entry is "+N": int() reads the sign; racing rollovers may repeat one
            numbers = sorted(set(map(int, parts[1:])))
        except ValueError:
            raise CorruptList(f"bad index {raw[:70]!r}") from None
        if not numbers:
            raise CorruptList(f"index without shards {raw[:70]!r}")
        return Index(parts[0].decode("ascii"), tuple(numbers))


@dataclass(slots=True)
class _Pending:
    ref: ListRef
    key: bytes  # the list's key, validated once: write rounds look it up many times
    tokens: bytes


@dataclass(slots=True)
class _Plan:
    appends: dict[bytes, bytes] = field(default_factory=dict)
    rollovers: list[tuple[_Pending, Index]] = field(default_factory=list)


class TokenLists(abc.ABC):
    """What every list layout shares: keys, leases and rebuilds, the read and write retry loops,
    invalidation, the dirtiness rule, and skipping writes to lists that are not in the cache.
    A layout supplies ``_build_many``, ``_read_round`` and ``_write_round``."""

    def __init__(
        self,
        cache: MemcacheCluster,
        source: MemberSource,
        settings: ListSettings | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.cache = cache
        self.source = source
        self.settings = settings or ListSettings()
        self.stats = ListStats()
        self._rng = rng or random.Random()
        self._skipped: set[ListRef] = set()  # lists the current write skipped

    def index_key(self, ref: ListRef) -> bytes:
        return self.keys_for(ref.kind, [ref.user])[0]

    def index_keys(self, refs: Sequence[ListRef]) -> list[bytes]:
        """``index_key`` of many lists, in order: one ``keys_for`` per kind."""
        keys: list[bytes] = [b""] * len(refs)
        for kind in {ref.kind for ref in refs}:
            at = [i for i, ref in enumerate(refs) if ref.kind is kind]
            for i, key in zip(at, self.keys_for(kind, [refs[i].user for i in at]), strict=True):
                keys[i] = key
        return keys

    def keys_for(self, kind: ListKind, users: Sequence[str]) -> list[bytes]:
        """The lists' keys, built only from valid ids (a key is the other place user input
        reaches memcached); for many users at C speed: one check, one join, one split."""
        if not all_valid_ids(users):
            bad = next(u for u in users if not is_valid_id(u))
            raise ValueError(f"invalid user id {bad!r}")
        if not users:
            return []
        prefix = f"{self.settings.namespace}:{kind.value}:"
        return (prefix + (" " + prefix).join(users)).encode("ascii").split(b" ")

    def invalidate(self, refs: Iterable[ListRef]) -> None:
        """Drop lists so the next reader or writer rebuilds them from the store."""
        keys = self.index_keys(list(refs))
        if keys:
            self.cache.delete_many(keys)
            self.stats.invalidations += len(keys)

    def rebuild(self, ref: ListRef, force: bool = False) -> frozenset[str] | None:
        return self.rebuild_many([ref], force)[ref]

    def rebuild_many(
        self, refs: Sequence[ListRef], force: bool = False
    ) -> dict[ListRef, frozenset[str] | None]:
        """Build lists from the store; None for a list another client built (or is building)
        first, in which case the caller goes round again and finds that client's index.
        Pipelined: one round trip per server for the leases, the shards and the indexes."""
        if force:
            self.invalidate(refs)
        unique = list(dict.fromkeys(refs))
        leases = {
            key + b":rb": ref for key, ref in zip(self.index_keys(unique), unique, strict=True)
        }
        taken = self.cache.add_many(dict.fromkeys(leases, b"1"), expire=REBUILD_LEASE_S)
        result: dict[ListRef, frozenset[str] | None] = {}
        for lease, ok in taken.items():
            if not ok:
                self._await_index(leases[lease])
                result[leases[lease]] = None
        mine = [lease for lease, ok in taken.items() if ok]
        try:
            result.update(self._build_many([leases[lease] for lease in mine]))
        finally:
            self.cache.delete_many(mine)
        return result

    def _await_index(self, ref: ListRef) -> None:
        deadline = time.monotonic() + REBUILD_WAIT_S
        key = self.index_key(ref)
        while time.monotonic() < deadline and key not in self.cache.get_many([key]):
            time.sleep(0.01)

    def read(self, ref: ListRef) -> frozenset[str]:
        return self.read_many([ref])[ref]

    def read_many(self, refs: Sequence[ListRef]) -> dict[ListRef, frozenset[str]]:
        """Every list in one pass per round (multi-GETs with CAS ids, so that a dirty list is
        compacted without another read); absent lists are built from the source."""
        result: dict[ListRef, frozenset[str]] = {}
        todo = list(dict.fromkeys(refs))
        for _ in range(MAX_WRITE_ATTEMPTS):
            if not todo:
                return result
            todo = self._read_round(todo, result)
            self.stats.retries += bool(todo)
        raise ListWriteError(f"could not read {len(todo)} lists after retries")

    def _is_dirty(self, decoded: DecodedList) -> bool:
        cap = self.settings.max_members
        dead = decoded.dead if cap is None else decoded.tokens - min(len(decoded.members), cap)
        return dead > self.settings.dirty_min and dead > self.settings.dirty_ratio * decoded.tokens

    def apply(self, changes: Mapping[ListRef, Sequence[tuple[bool, str]]]) -> None:
        """Append tokens to many lists. The edge store must already hold these changes."""
        self.append_tokens({ref: encode(ops) for ref, ops in changes.items() if ops})

    def append_tokens(self, tokens: Mapping[ListRef, bytes]) -> None:
        """``apply`` for tokens already encoded. Sharded lists: one index GET, one INCR and one
        APPEND round trip per server in the normal case; capped lists: one APPEND."""
        self._skipped = set()
        refs = [ref for ref, data in tokens.items() if data]
        self._settle(
            [_Pending(r, k, tokens[r]) for r, k in zip(refs, self.index_keys(refs), strict=True)]
        )
        self._compact_written(self._sample(list(tokens)))

    def _settle(self, pending: list[_Pending]) -> None:
        for attempt in range(MAX_WRITE_ATTEMPTS):
            if not pending:
                return
            if attempt:
                self.stats.retries += 1
            pending = self._write_round(pending)
        raise ListWriteError(f"could not append to {len(pending)} lists after retries")

    def _sample(self, written: Sequence[T]) -> list[T]:
        """A random ``compact_write_prob`` share of what a write touched (rounded at random,
        so small writes are sampled too)."""
        share = self.settings.compact_write_prob * len(written)
        return self._rng.sample(written, min(len(written), int(share + self._rng.random())))

    def _compact_written(self, refs: Iterable[ListRef]) -> None:
        """Read, and so compact if dirty, lists just written to; not those the write skipped:
        they are not in the cache, and a read would build them."""
        chosen = [ref for ref in refs if ref not in self._skipped]
        if chosen:
            self.read_many(chosen)

    def _skip_absent(self, absent: list[_Pending]) -> list[_Pending]:
        """A write never builds a list: one that is not in the cache is left alone, and its next
        reader builds it from the store, which already holds this write (so a cold follower or
        an inactive user's timeline costs the writer nothing, and an APPEND never creates a
        list holding only the new token). The one unsafe moment is a rebuild that read the
        store before this write and has not yet ADDed its index: it holds the lease, so wait
        for its index and append to it. Without a lease, look at the index once more (a
        rebuild may have just finished); if it is still absent, skipping is safe."""
        if not absent:
            return []
        leased = self.cache.exists_many([p.key + b":rb" for p in absent])
        again = []
        for item in absent:
            if leased[item.key + b":rb"]:
                self._await_index(item.ref)
                again.append(item)
        unleased = [p for p in absent if not leased[p.key + b":rb"]]
        appeared = self.cache.exists_many([p.key for p in unleased])
        for item in unleased:
            if appeared[item.key]:
                again.append(item)
            else:
                self.stats.skipped_absent += 1
                self._skipped.add(item.ref)  # and not compacted either: that would build it
        return again

    @abc.abstractmethod
    def _build_many(self, refs: Sequence[ListRef]) -> dict[ListRef, frozenset[str] | None]:
        """Build lists from the source under leases already taken; None where one lost."""

    @abc.abstractmethod
    def _read_round(
        self, refs: list[ListRef], result: dict[ListRef, frozenset[str]]
    ) -> list[ListRef]:
        """Read what can be read into ``result``; return the lists to go round again for."""

    @abc.abstractmethod
    def _write_round(self, pending: list[_Pending]) -> list[_Pending]:
        """Append what can be appended; return what must go round again."""


class ListStore(TokenLists):
    """Sharded lists (followers, following): an index item and shards behind it."""

    @staticmethod
    def shard_key(index_key: bytes, gen: str, shard: int) -> bytes:
        return b"%s:%s:%d" % (index_key, gen.encode("ascii"), shard)

    @staticmethod
    def counter_key(shard_key: bytes) -> bytes:
        return shard_key + b":n"

    # -- rebuilds ----------------------------------------------------------------------------

    def _build_many(self, refs: Sequence[ListRef]) -> dict[ListRef, frozenset[str] | None]:
        """Shards first, then the index: the index ADD is the commit point of a rebuild."""
        members: dict[ListRef, list[str]] = {}
        shards: dict[ListRef, dict[bytes, bytes]] = {}
        indexes: dict[bytes, bytes] = {}
        keys = self.index_keys(refs)
        for ref, key in zip(refs, keys, strict=True):
            members[ref] = sorted(self.source.all_members(ref))
            gen = secrets.token_hex(4)
            chunks = self._chunk(encode_members(members[ref]))
            shard_keys = [self.shard_key(key, gen, i) for i in range(len(chunks))]
            shards[ref] = dict(zip(shard_keys, chunks, strict=True))
            shards[ref][self.counter_key(shard_keys[-1])] = b"%d" % len(chunks[-1])
            indexes[key] = gen.encode() + b" " + b"".join(b"+%d " % i for i in range(len(chunks)))
        self.cache.add_many({k: v for values in shards.values() for k, v in values.items()})
        committed = self.cache.add_many(indexes)
        result: dict[ListRef, frozenset[str] | None] = {}
        orphans: list[bytes] = []
        for ref, key in zip(refs, keys, strict=True):
            if committed[key]:
                result[ref] = frozenset(members[ref])
                self.stats.rebuilds += 1
            else:  # lost the ADD race: our shards are orphans
                result[ref] = None
                orphans += shards[ref]
        if orphans:
            self.cache.delete_many(orphans)
        return result

    def _chunk(self, data: bytes) -> list[bytes]:
        limit = self.settings.shard_bytes
        chunks: list[bytes] = []
        start = 0
        while len(data) - start > limit:
            cut = data.rfind(b" ", start, start + limit) + 1
            if cut <= start:  # one token longer than a shard: cannot happen with valid ids
                raise ValueError("shard size smaller than one token")
            chunks.append(data[start:cut])
            start = cut
        chunks.append(data[start:])
        return chunks

    # -- reads -------------------------------------------------------------------------------

    def _read_round(
        self, refs: list[ListRef], result: dict[ListRef, frozenset[str]]
    ) -> list[ListRef]:
        again: list[ListRef] = []
        keys = dict(zip(refs, self.index_keys(refs), strict=True))
        raw_indexes = self.cache.get_many(keys.values())
        indexes: dict[ListRef, Index] = {}
        broken: list[ListRef] = []
        missing = [ref for ref in refs if keys[ref] not in raw_indexes]
        for ref, rebuilt in self.rebuild_many(missing).items():
            if rebuilt is None:
                again.append(ref)
            else:
                result[ref] = rebuilt
        for ref in refs:
            raw = raw_indexes.get(keys[ref])
            if raw is None:
                continue
            try:
                indexes[ref] = Index.parse(raw)
            except CorruptList:
                broken.append(ref)
        shard_keys = {
            ref: [self.shard_key(keys[ref], idx.gen, n) for n in idx.shards]
            for ref, idx in indexes.items()
        }
        shards = self.cache.gets_many([k for ks in shard_keys.values() for k in ks])
        for ref, ks in shard_keys.items():
            if any(k not in shards for k in ks):
                broken.append(ref)
                continue
            try:
                decoded = decode(shards[k][0] for k in ks)
            except CorruptList:
                broken.append(ref)
                continue
            result[ref] = decoded.members
            if self._is_dirty(decoded):
                self._compact(ks, [shards[k] for k in ks])
        self.invalidate(broken)
        return again + broken

    # -- compaction ------------------------------------------------------------------------------

    def _compact(self, keys: list[bytes], shards: list[tuple[bytes, bytes]]) -> bool:
        """Rewrite shards in order with CAS; give up at the first lost race (see compact_shards)."""
        rewritten = compact_shards([value for value, _ in shards], self.settings.max_members)
        for key, (old, cas_id), new in zip(keys, shards, rewritten, strict=True):
            if new == old:
                continue
            if not self.cache.cas(key, new, cas_id):
                self.stats.compactions_lost += 1
                return False
        self.stats.compactions += 1
        return True

    # -- writes ------------------------------------------------------------------------------

    def _write_round(self, pending: list[_Pending]) -> list[_Pending]:
        again: list[_Pending] = []
        broken: list[ListRef] = []
        raw_indexes = self.cache.get_many([p.key for p in pending])
        located: list[tuple[_Pending, Index, bytes]] = []
        absent: list[_Pending] = []
        for item in pending:
            raw = raw_indexes.get(item.key)
            if raw is None:
                absent.append(item)
                continue
            try:
                idx = Index.parse(raw)
            except CorruptList:
                broken.append(item.ref)
                again.append(item)
                continue
            located.append((item, idx, self.shard_key(item.key, idx.gen, idx.shards[-1])))

        again += self._skip_absent(absent)
        sizes = self.cache.incr_many({self.counter_key(k): len(p.tokens) for p, _, k in located})
        plan = _Plan()
        uncounted: list[tuple[_Pending, bytes]] = []
        for item, idx, key in located:
            size = sizes[self.counter_key(key)]
            if size is None:
                uncounted.append((item, key))
            elif size > self.settings.shard_bytes and size > len(item.tokens):
                plan.rollovers.append((item, idx))
            else:
                plan.appends[key] = item.tokens
        again += self._recount(uncounted, broken)

        by_key = {k: (p, i) for p, i, k in located}
        stored = self.cache.append_many(plan.appends)
        failed = [k for k, ok in stored.items() if not ok]
        self.stats.appends += len(stored) - len(failed)
        for key, exists in self.cache.exists_many(failed).items():
            item, idx = by_key[key]
            if exists:  # NOT_STORED on a present item: it would pass the item size limit
                plan.rollovers.append((item, idx))
            else:  # the shard was evicted: the list is incomplete
                broken.append(item.ref)
                again.append(item)
        again += self._roll_over(plan.rollovers, broken)
        self.invalidate(broken)
        return again

    def _recount(
        self, uncounted: list[tuple[_Pending, bytes]], broken: list[ListRef]
    ) -> list[_Pending]:
        """Counter evicted: seed it from the shard's real length and retry the append."""
        if not uncounted:
            return []
        present = self.cache.get_many([k for _, k in uncounted])
        seeds = {}
        for item, key in uncounted:
            if key in present:
                seeds[self.counter_key(key)] = b"%d" % len(present[key])
            else:
                broken.append(item.ref)
        self.cache.add_many(seeds)
        return [item for item, _ in uncounted]

    def _roll_over(
        self, rollovers: list[tuple[_Pending, Index]], broken: list[ListRef]
    ) -> list[_Pending]:
        """Open shard N+1: index entry first, so a crash leaves a missing shard (detected,
        rebuilt) rather than an orphaned one (silently short)."""
        if not rollovers:
            return []
        again: list[_Pending] = []
        entries = {}
        for item, idx in rollovers:
            entries[item.key] = b"+%d " % (idx.shards[-1] + 1)
        indexed = self.cache.append_many(entries)
        new_shards: dict[bytes, _Pending] = {}
        for item, idx in rollovers:
            if not indexed[item.key]:
                again.append(item)  # index gone: the next round rebuilds
                continue
            new_shards[self.shard_key(item.key, idx.gen, idx.shards[-1] + 1)] = item
        added = self.cache.add_many({k: p.tokens for k, p in new_shards.items()})
        self.cache.add_many(
            {
                self.counter_key(k): b"%d" % len(new_shards[k].tokens)
                for k, ok in added.items()
                if ok
            }
        )
        raced = {k: new_shards[k].tokens for k, ok in added.items() if not ok}
        for key, ok in self.cache.append_many(raced).items():
            if not ok:
                again.append(new_shards[key])
        self.stats.rollovers += sum(added.values())
        self.stats.appends += len(new_shards) - len(again)
        return again
