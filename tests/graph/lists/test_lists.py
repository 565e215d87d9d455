"""Sharded token lists on the real memcached servers of the local stack."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import cast

import pytest

from tests.conftest import Refused
from tests.graph.lists.contention import STAR, contend, write
from tests.held_ring import HeldRing, own_trust, process_trust
from timeline_fanout.graph import (
    EdgeChange,
    ListKind,
    ListRef,
    ListSettings,
    ShardedLists,
)
from timeline_fanout.graph.lists.capped import CappedLayout, CappedLists
from timeline_fanout.graph.lists.fencing import Index
from timeline_fanout.graph.lists.sharded import ShardedLayout
from timeline_fanout.graph.lists.token_lists import Delivery, TokenLists
from timeline_fanout.graph.lists.tokens import Change
from timeline_fanout.graph.model.edges import Snapshot
from timeline_fanout.graph.model.keys import counter_key, shard_key
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore
from timeline_fanout.memcache import CacheUnavailable, Item
from timeline_fanout.memcache.cluster import MemcacheCluster
from timeline_fanout.memcache.interface import Cache
from timeline_fanout.memcache.ring import EpochState
from timeline_fanout.memcache.trust import TrustSettings


def index_of(lists: ShardedLists, ref: ListRef) -> Index:
    raw = lists.cache.get_many([lists.index_key(ref)])[lists.index_key(ref)]
    return Index.parse(raw)


def shard_keys(lists: ShardedLists, ref: ListRef) -> list[bytes]:
    idx = index_of(lists, ref)
    return [shard_key(lists.index_key(ref), idx.gen, s) for s in idx.shards]


def twin(cache: MemcacheCluster, kind: type[MemcacheCluster] = MemcacheCluster) -> MemcacheCluster:
    """Another client of the same servers (another consumer process)."""
    servers = [("127.0.0.1", int(s.rpartition(":")[2])) for s in cache.servers]
    return kind(servers, trust=own_trust(servers))


class Frozen:
    """A source that answers what the store held when a rebuild read it (a stale snapshot)."""

    def __init__(self, members: dict[str, int]) -> None:
        self.members = members

    def snapshot(self, ref: ListRef) -> Snapshot:
        names = sorted(self.members)
        return Snapshot(names, [self.members[n] for n in names])


def test_a_list_larger_than_several_shards_reads_back_exactly(
    sqlite_store: SqliteEdgeStore, lists: ShardedLists
) -> None:
    lists.read(STAR)  # materialise it: writes only append to lists in the cache
    names = [f"user{i:05d}" for i in range(400)]
    for i in range(0, 400, 7):  # many small batches: rollovers happen on the write path
        write(
            sqlite_store,
            lists,
            [EdgeChange(n, "star", True, i + j) for j, n in enumerate(names[i : i + 7])],
        )
    keys = shard_keys(lists, STAR)
    assert len(keys) >= 5
    shards = lists.cache.get_many(keys)
    # Soft limit: a shard is closed once it passes the limit, by at most one batch's tokens.
    assert all(len(shards[k]) <= 128 + 7 * len(b"+user00000#fff ") for k in keys)
    assert lists.read(STAR) == frozenset(names)
    assert lists.stats.rollovers >= 4


def test_rebuild_splits_a_big_list_into_shards(
    sqlite_store: SqliteEdgeStore, lists: ShardedLists
) -> None:
    names = [f"m{i}" for i in range(300)]
    sqlite_store.apply([EdgeChange(n, "star", True, i) for i, n in enumerate(names)])
    assert lists.read(STAR) == frozenset(names)  # a miss: rebuilt from the store
    assert len(index_of(lists, STAR).shards) > 5
    assert lists.stats.rebuilds == 1


def test_append_to_a_missing_list_never_adds_a_list_of_only_the_new_token(
    sqlite_store: SqliteEdgeStore, lists: ShardedLists
) -> None:
    write(sqlite_store, lists, [EdgeChange(n, "star", True, i) for i, n in enumerate("abc")])
    lists.cache.flush_all()
    write(sqlite_store, lists, [EdgeChange("d", "star", True, 10)])
    assert lists.read(STAR) == {"a", "b", "c", "d"}


@pytest.mark.parametrize(
    "lose", ["index", "journal", "first data shard", "newest shard", "counter"]
)
def test_any_lost_item_yields_the_exact_list(
    sqlite_store: SqliteEdgeStore, lists: ShardedLists, lose: str
) -> None:
    lists.read(STAR)  # materialise it: writes only append to lists in the cache
    names = [f"n{i:03d}" for i in range(60)]
    for i in range(0, 60, 10):
        write(
            sqlite_store,
            lists,
            [EdgeChange(n, "star", True, i + j) for j, n in enumerate(names[i : i + 10])],
        )
    keys = shard_keys(lists, STAR)
    victim = {
        "index": lists.index_key(STAR),
        "journal": keys[0],
        "first data shard": keys[1],
        "newest shard": keys[-1],
        "counter": counter_key(keys[-1]),
    }[lose]
    lists.cache.delete_many([victim])
    write(
        sqlite_store,
        lists,
        [EdgeChange("late", "star", True, 100), EdgeChange("n000", "star", False, 101)],
    )
    expected = (set(names) | {"late"}) - {"n000"}
    assert lists.read(STAR) == expected
    assert set(sqlite_store.followers("star", limit=1000)) == expected


def test_a_counter_holding_no_number_is_seeded_again_and_the_write_lands(
    sqlite_store: SqliteEdgeStore, lists: ShardedLists
) -> None:
    """Bytes our writers never write in a shard's counter (memcached refuses to count them)
    are a lost counter: every later write to the list must not fail on it until it expires."""
    lists.read(STAR)  # materialise it: writes only append to lists in the cache
    write(sqlite_store, lists, [EdgeChange("a", "star", True, 1)])
    counter = counter_key(shard_keys(lists, STAR)[-1])
    lists.cache.append_many({counter: b"x"})
    write(sqlite_store, lists, [EdgeChange("b", "star", True, 2)])
    assert lists.read(STAR) == {"a", "b"}
    assert lists.cache.get_many([counter]) != {counter: b"x"}


def test_corrupt_list_is_rebuilt(sqlite_store: SqliteEdgeStore, lists: ShardedLists) -> None:
    lists.read(STAR)  # materialise it: writes only append to lists in the cache
    write(sqlite_store, lists, [EdgeChange("a", "star", True, 1)])
    lists.cache.append_many({shard_keys(lists, STAR)[-1]: b"garbage "})
    assert lists.read(STAR) == {"a"}
    assert lists.stats.invalidations == 1


@pytest.mark.parametrize("member", [b"x" * 65, b"a/b", b"a\x01b"])
def test_a_member_that_is_no_user_id_makes_the_list_corrupt(
    sqlite_store: SqliteEdgeStore, lists: ShardedLists, member: bytes
) -> None:
    """A well-formed token our writers never write (its member no id) is a corrupt byte like
    any other: the list is rebuilt, never served (a fan-out would fail building its key)."""
    lists.read(STAR)  # materialise it: writes only append to lists in the cache
    write(sqlite_store, lists, [EdgeChange("a", "star", True, 1)])
    lists.cache.append_many({shard_keys(lists, STAR)[-1]: b"+" + member + b"#2 "})
    assert lists.read(STAR) == {"a"}
    assert lists.stats.invalidations == 1


@pytest.mark.parametrize("forged", ["long generation", "generation not hex", "long shard name"])
def test_a_head_no_writer_writes_is_corrupt_and_the_write_lands(
    sqlite_store: SqliteEdgeStore, lists: ShardedLists, forged: str
) -> None:
    """A head whose names only look like ours (keys past memcached's 250-byte limit, a
    deadline that is no number; its shards and a full counter in place, so the next write
    rolls over) is dropped like any corrupt head: the write is neither retried forever nor
    failed as poison, and the list is exact."""
    lists.read(STAR)  # materialise it: writes only append to lists in the cache
    write(sqlite_store, lists, [EdgeChange("a", "star", True, 1)])
    head = lists.index_key(STAR)
    idx = index_of(lists, STAR)
    gen, shards = {
        "long generation": (b"a" * 240, idx.shards),
        "generation not hex": (b"zzzzzzzz" + idx.gen[8:], idx.shards),
        "long shard name": (idx.gen, (*idx.shards, b"b" * 240)),
    }[forged]
    items = lists.cache.get_many(shard_keys(lists, STAR))
    copies = {shard_key(head, gen, s): items.get(shard_key(head, idx.gen, s), b"") for s in shards}
    copies[counter_key(shard_key(head, gen, shards[-1]))] = b"99999"
    lists.cache.set_many({k: v for k, v in copies.items() if len(k) <= 250})
    lists.cache.set_many({head: Index(gen, shards, False).encode()})
    write(sqlite_store, lists, [EdgeChange("b", "star", True, 2)])
    assert lists.read(STAR) == {"a", "b"}


def test_flush_of_every_server_mid_run_still_yields_exact_lists(
    sqlite_store: SqliteEdgeStore, lists: ShardedLists
) -> None:
    rng = random.Random(5)
    model: dict[tuple[str, str], bool] = {}
    for step in range(40):
        batch = []
        for j in range(25):
            edge = (f"f{rng.randrange(30)}", f"e{rng.randrange(5)}")
            active = rng.random() < 0.7
            model[edge] = active
            batch.append(EdgeChange(edge[0], edge[1], active, step * 100 + j))
        write(sqlite_store, lists, batch)
        if step in (13, 27):
            lists.cache.flush_all()
        if step % 5 == 0:  # keep lists cached so that writes really append
            lists.read_many([ListRef(ListKind.FOLLOWERS, f"e{i}") for i in range(5)])
    for kind, pick, other in ((ListKind.FOLLOWERS, 1, 0), (ListKind.FOLLOWING, 0, 1)):
        users = {edge[pick] for edge in model}
        got = lists.read_many([ListRef(kind, u) for u in users])
        for user in users:
            expected = {e[other] for e, on in model.items() if on and e[pick] == user}
            assert got[ListRef(kind, user)] == expected, (kind, user)


def test_dirty_list_is_compacted_on_read(
    sqlite_store: SqliteEdgeStore, lists: ShardedLists
) -> None:
    lists.read(STAR)  # materialise it: writes only append to lists in the cache
    for round_ in range(6):
        write(
            sqlite_store,
            lists,
            [EdgeChange(f"x{i}", "star", round_ % 2 == 0, round_ * 100 + i) for i in range(20)],
        )
    # 20 adds, then remove/add/remove/add/remove: 120 tokens, 0 members
    keys = shard_keys(lists, STAR)
    before = sum(len(v) for v in lists.cache.get_many(keys).values())
    assert lists.read(STAR) == frozenset()
    after = sum(len(v) for v in lists.cache.get_many(keys).values())
    assert lists.stats.compactions == 1 and after < before
    write(sqlite_store, lists, [EdgeChange("x1", "star", True, 1000)])
    assert lists.read(STAR) == {"x1"}


def test_churn_among_a_few_members_keeps_the_list_small(
    sqlite_store: SqliteEdgeStore, lists: ShardedLists
) -> None:
    """Counters shrink with compaction, so a list of 2-3 members under follow/unfollow churn
    does not roll over without end (without shrinking, it reached 211 shards)."""
    lists.read(STAR)
    rng = random.Random(10)
    for step in range(600):
        member = f"c{rng.randrange(3)}"
        write(sqlite_store, lists, [EdgeChange(member, "star", rng.random() < 0.5, step)])
        if step % 20 == 0:
            lists.read(STAR)  # readers compact
    assert lists.read(STAR) == set(sqlite_store.followers("star"))
    assert len(index_of(lists, STAR).shards) <= 4
    assert len(lists.cache.get_many([lists.index_key(STAR)])[lists.index_key(STAR)]) < 64


def test_compaction_that_loses_the_cas_race_gives_up_and_drops_nothing(
    sqlite_store: SqliteEdgeStore, lists: ShardedLists
) -> None:
    lists.read(STAR)  # materialise it: writes only append to lists in the cache
    write(sqlite_store, lists, [EdgeChange(f"x{i}", "star", True, i) for i in range(10)])
    write(sqlite_store, lists, [EdgeChange(f"x{i}", "star", False, 100 + i) for i in range(10)])
    keys = shard_keys(lists, STAR)
    snapshot = lists.cache.gets_many(keys)
    # A writer appends between the compactor's gets and its cas.
    write(sqlite_store, lists, [EdgeChange("racer", "star", True, 500)])
    lists.layout._compact(keys, [snapshot[k] for k in keys])
    assert lists.stats.compactions_lost == 1 and lists.stats.compactions == 0
    assert lists.read(STAR) == {"racer"}


def test_a_late_older_token_loses_to_a_newer_one_whatever_the_append_order(
    sqlite_store: SqliteEdgeStore, lists: ShardedLists
) -> None:
    """What was the zombie-consumer hole: an old token appended after a newer one. Tokens carry
    positions, so the newer one wins wherever it sits."""
    lists.read(STAR)
    write(sqlite_store, lists, [EdgeChange("x", "star", True, 1)])
    write(sqlite_store, lists, [EdgeChange("x", "star", False, 2)])
    lists.apply({STAR: [(True, "x", 1)]})  # the zombie's late append of the older event
    write(sqlite_store, lists, [EdgeChange("y", "star", False, 5)])
    lists.apply({STAR: [(True, "y", 4)]})  # and the other way round
    assert lists.read(STAR) == frozenset() == set(sqlite_store.followers("star"))


# -- the fence (graph/lists/fencing.py): unfenced rebuilds, lost claims, re-added shards --------


def test_an_invalidation_during_a_rebuild_makes_its_stale_commit_fail(
    cache: MemcacheCluster, unique: str
) -> None:
    """A rebuild that read the store before a change must not commit after the
    invalidation that followed the change."""
    settings = ListSettings(namespace=unique)
    stale = TokenLists(ShardedLayout, twin(cache), Frozen({"removed": 1}), settings)
    key = stale.index_key(STAR)
    gen = b"0badf00d"
    assert stale.layout.claim({key: gen}) == {key}
    TokenLists(ShardedLayout, cache, Frozen({}), settings).invalidate(
        [STAR]
    )  # the change's invalidation
    assert stale.layout.commit({key: (gen, Frozen({"removed": 1}).snapshot(STAR))}) == set()
    assert TokenLists(ShardedLayout, cache, Frozen({}), settings).read(STAR) == frozenset()


def test_a_write_during_a_rebuild_lands_in_its_journal(
    sqlite_store: SqliteEdgeStore, cache: MemcacheCluster, unique: str
) -> None:
    """The rebuild read the store before our write; our write must reach what it commits."""
    settings = ListSettings(namespace=unique, compact_write_prob=0)
    rebuilder = TokenLists(ShardedLayout, twin(cache), Frozen({"a": 1}), settings)
    key = rebuilder.index_key(STAR)
    assert rebuilder.layout.claim({key: b"00000001"}) == {key}
    writer = TokenLists(ShardedLayout, cache, sqlite_store, settings)
    sqlite_store.apply([EdgeChange("a", "star", True, 1), EdgeChange("b", "star", True, 2)])
    writer.apply({STAR: [(True, "b", 2)]})
    assert writer.stats.skipped_absent == 0 and writer.stats.appends == 1
    assert rebuilder.layout.commit({key: (b"00000001", Frozen({"a": 1}).snapshot(STAR))}) == {key}
    assert writer.read(STAR) == {"a", "b"}


@pytest.mark.parametrize("how", ["evicted", "expired and reclaimed"])
def test_a_lost_claim_cannot_commit(
    sqlite_store: SqliteEdgeStore, cache: MemcacheCluster, unique: str, how: str
) -> None:
    """The claim (the lease) vanishes mid-rebuild, a writer finds the list absent and
    skips; the rebuild that missed that write must not commit. Nor may it disturb the claim
    that replaced its own."""
    settings = ListSettings(namespace=unique, compact_write_prob=0)
    slow = TokenLists(ShardedLayout, twin(cache), Frozen({"a": 1}), settings)
    key = slow.index_key(STAR)
    assert slow.layout.claim({key: b"0000aaaa"}) == {key}
    cache.delete_many([key])  # eviction, a restart, or the lease running out
    if how == "expired and reclaimed":
        other = TokenLists(ShardedLayout, cache, sqlite_store, settings)
        assert other.layout.claim({key: b"0000bbbb"}) == {key}
    writer = TokenLists(ShardedLayout, cache, sqlite_store, settings)
    sqlite_store.apply([EdgeChange("a", "star", True, 1), EdgeChange("b", "star", True, 2)])
    writer.apply({STAR: [(True, "b", 2)]})
    assert slow.layout.commit({key: (b"0000aaaa", Frozen({"a": 1}).snapshot(STAR))}) == set()
    if how == "expired and reclaimed":
        assert index_of(writer, STAR).gen == b"0000bbbb"  # the other claim is untouched
        cache.delete_many([key])
    assert writer.read(STAR) == {"a", "b"}


def test_a_stale_rollover_never_re_adds_an_evicted_shard(
    sqlite_store: SqliteEdgeStore, lists: ShardedLists
) -> None:
    """A writer with a stale view of the index rolls over while the shard it would
    have named again was evicted: its CAS fails, and the eviction is found, not hidden."""
    lists.read(STAR)
    names = [f"u{i:03d}" for i in range(40)]
    for i in range(0, 40, 4):
        write(sqlite_store, lists, [EdgeChange(n, "star", True, i) for n in names[i : i + 4]])
    stale_head = lists.cache.gets_many([lists.index_key(STAR)])[lists.index_key(STAR)]
    for i in range(40, 80, 4):  # rollovers move the index on
        write(
            sqlite_store,
            lists,
            [EdgeChange(f"v{j}", "star", True, 100 + j) for j in range(i, i + 4)],
        )
    keys = shard_keys(lists, STAR)
    lists.cache.delete_many([keys[-2]])  # evict a shard the stale view does not know
    swapped = lists.cache.cas(lists.index_key(STAR), stale_head.value + b"+abcdef ", stale_head.cas)
    assert not swapped.ok  # the fence: a stale view cannot name shards
    expected = set(sqlite_store.followers("star", limit=1000))
    assert lists.read(STAR) == expected and len(expected) == 80


def test_a_herd_waits_for_the_rebuild_in_progress(
    sqlite_store: SqliteEdgeStore, cache: MemcacheCluster, unique: str
) -> None:
    settings = ListSettings(namespace=unique)
    sqlite_store.apply([EdgeChange("a", "star", True, 1)])
    queries: list[ListRef] = []
    herd_waiting = threading.Event()

    class Counting:
        def snapshot(self, ref: ListRef) -> Snapshot:
            queries.append(ref)
            return sqlite_store.snapshot(ref)

    class WaitsForTheHerd(Frozen):
        def snapshot(self, ref: ListRef) -> Snapshot:
            assert herd_waiting.wait(30)
            return super().snapshot(ref)

    class Waiting(MemcacheCluster):
        def wait(self, seconds: float) -> None:
            herd_waiting.set()
            super().wait(seconds)

    holder = TokenLists(ShardedLayout, twin(cache), WaitsForTheHerd({"a": 1}), settings)
    herd = TokenLists(ShardedLayout, twin(cache, Waiting), Counting(), settings)
    key = holder.index_key(STAR)
    assert holder.layout.claim({key: b"00000123"}) == {key}
    finisher = threading.Thread(
        target=lambda: holder.layout.commit({key: (b"00000123", holder.source.snapshot(STAR))})
    )
    finisher.start()
    assert herd.read(STAR) == {"a"}
    finisher.join()
    assert queries == [] and herd.stats.build_waits >= 1  # the herd never queried the store


def test_concurrent_writers_and_compacting_readers_lose_nothing(
    tmp_path: Path, cache: MemcacheCluster, unique: str
) -> None:
    """Eight writers flip their own members of one hot list on and off; four readers read and
    compact it all the while, with tiny shards."""
    servers = [(h, int(p)) for h, _, p in (s.rpartition(":") for s in cache.servers)]
    settings = ListSettings(
        shard_bytes=96, dirty_ratio=0.3, dirty_min=2, namespace=unique, compact_write_prob=0.2
    )
    result = contend(servers, tmp_path / "edges.db", settings)
    assert not result.errors, result.errors
    assert result.cached == result.expected == result.stored
    assert sum(s.compactions for s in result.stats) > 0  # the race was really exercised
    assert sum(s.rollovers for s in result.stats) > 0


def test_a_list_on_a_down_server_is_read_whole_from_the_store_and_writes_go_on_until_no_record(
    sqlite_store: SqliteEdgeStore, unique: str, refused: Refused
) -> None:
    """Never a shorter list: a read goes around the server to the store. A write it misses
    is recorded in the register (a lone server too), so the batch may commit; once the
    register cannot be read, nothing can be recorded, and the write is an error (the batch is
    retried)."""
    register = HeldRing(None)
    name = f"{refused.pair[0]}:{refused.pair[1]}"
    trust = process_trust([name], register, TrustSettings(timeout_s=0.5), 0.2)
    down = MemcacheCluster([refused.pair], trust=trust)
    lists = TokenLists(ShardedLayout, down, sqlite_store, ListSettings(namespace=unique))
    sqlite_store.apply([EdgeChange("a", "star", True, 1)])
    assert lists.read(STAR) == {"a"}
    assert lists.stats.degraded_reads == 1
    lists.apply({STAR: [(True, "a", 1)]})
    assert register.record is not None
    assert register.record.epoch(name).state is EpochState.DOWN
    assert lists.read(STAR) == {"a"}
    register.broken = True
    down.wait(0.3)  # the lease on the record runs out, and cannot be renewed
    with pytest.raises(CacheUnavailable):
        lists.apply({STAR: [(True, "b", 2)]})
    assert lists.read(STAR) == {"a"}


@pytest.mark.parametrize(
    "user", ["a b", "a\nb", "a\r\n", "ctl\x01", "ctl\x1f", "x" * 65, "", "k\x7f", "ü", "a|b"]
)
def test_no_unvalidated_input_reaches_a_memcached_key(lists: ShardedLists, user: str) -> None:
    """pymemcache itself lets \\x01..\\x1f through; the list layer refuses them first."""
    with pytest.raises(ValueError):
        lists.index_key(ListRef(ListKind.FOLLOWERS, user))
    with pytest.raises(ValueError):
        lists.read(ListRef(ListKind.FOLLOWING, user))


def test_a_user_named_like_another_users_keys_cannot_touch_them(
    sqlite_store: SqliteEdgeStore, lists: ShardedLists
) -> None:
    """No id names another user's keys: with ``:`` as separator, user ``x:rb``'s list key
    would be user x's lease key, which would wedge every write of x."""
    for name in ("x:rb", "x:n", "x:0", "x"):
        sqlite_store.apply([EdgeChange(f"f-{len(name)}", name, True, len(name))])
    refs = [ListRef(ListKind.FOLLOWERS, n) for n in ("x:rb", "x:n", "x:0")]
    lists.read_many(refs)  # cached first
    write(sqlite_store, lists, [EdgeChange("g", "x", True, 10)])
    assert lists.read(ListRef(ListKind.FOLLOWERS, "x")) == {"f-1", "g"}
    assert lists.read_many(refs) == {r: {f"f-{len(r.user)}"} for r in refs}


def test_writes_skip_absent_lists_and_readers_build_them(
    sqlite_store: SqliteEdgeStore, cache: MemcacheCluster, unique: str
) -> None:
    settings = ListSettings(namespace=unique, compact_write_prob=1.0)  # would read: must not
    lazy = TokenLists(ShardedLayout, cache, sqlite_store, settings)
    sqlite_store.apply([EdgeChange("a", "star", True, 1)])
    lazy.apply({STAR: [(True, "a", 1)]})
    assert lazy.stats.skipped_absent == 1 and lazy.stats.rebuilds == 0
    assert lazy.index_key(STAR) not in cache.get_many([lazy.index_key(STAR)])
    assert lazy.read(STAR) == {"a"}  # the reader builds it from the store
    sqlite_store.apply([EdgeChange("b", "star", True, 2)])
    lazy.apply({STAR: [(True, "b", 2)]})  # now it exists: appended
    assert lazy.stats.appends == 1 and lazy.read(STAR) == {"a", "b"}


class _BuiltAfterFirstHeads:
    """A writer's cache on which another client builds ``ref`` right after the writer's first
    read of list heads: between the waves of one write."""

    def __init__(self, cache: MemcacheCluster, builder: ShardedLists, ref: ListRef) -> None:
        self._cache = cache
        self._builder = builder
        self._ref = ref
        self._heads = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._cache, name)

    def gets_many(self, keys: Iterable[bytes]) -> dict[bytes, Item]:
        found = self._cache.gets_many(keys)
        self._heads += 1
        if self._heads == 1:
            self._builder.read(self._ref)
        return found


def test_a_list_built_between_the_waves_of_a_write_counts_as_written(
    sqlite_store: SqliteEdgeStore, cache: MemcacheCluster, unique: str
) -> None:
    """A list's tokens larger than a shard go in waves. A list absent at the first wave and
    built by a reader before the next gets the later waves' tokens: the write reports it
    written, not skipped, or the graph applier would not read back the additions it appended
    there (a stale addition in a generation built after a newer removal stays)."""
    settings = ListSettings(namespace=unique, shard_bytes=256, compact_write_prob=0.0)
    changes = [EdgeChange(f"f{i:03d}", "star", True, i + 1) for i in range(40)]
    sqlite_store.apply(changes)
    reader = TokenLists(ShardedLayout, cache, sqlite_store, settings)
    racing = cast(Cache, _BuiltAfterFirstHeads(cache, reader, STAR))
    writer = TokenLists(ShardedLayout, racing, sqlite_store, settings)
    written = writer.apply({STAR: [Change(True, c.follower, c.pos) for c in changes]})
    assert writer.stats.skipped_absent == 1 and writer.stats.appends >= 1
    assert STAR not in written.skipped
    assert reader.read(STAR) == {c.follower for c in changes}


def test_every_cached_item_expires_and_a_divergent_list_heals(
    sqlite_store: SqliteEdgeStore, cache: MemcacheCluster, unique: str
) -> None:
    """Bounded self-healing: heads expire within heal_s (readers never extend them), their
    parts after twice that, so whatever a hole leaves behind is gone by then."""
    settings = ListSettings(namespace=unique, heal_s=2, compact_write_prob=0)
    lists = TokenLists(ShardedLayout, cache, sqlite_store, settings)
    sqlite_store.apply([EdgeChange("a", "star", True, 1)])
    assert lists.read(STAR) == {"a"}
    head = lists.index_key(STAR)
    keys = [head, *shard_keys(lists, STAR)]
    items = cache.gets_many([*keys, *map(counter_key, keys[1:])])
    assert all(0 < item.ttl <= 2 * 2 + 60 for item in items.values())
    # An absolute deadline of whole seconds, read against memcached's clock, which ticks once a
    # second and may lag the wall clock by one: up to two seconds more than heal_s.
    assert items[head].ttl <= 2 + 2
    lists.apply({STAR: [(True, "ghost", 99)]})  # a divergence the store does not have
    assert lists.read(STAR) == {"a", "ghost"}
    deadline = time.monotonic() + 10
    while head in cache.get_many([head]) and time.monotonic() < deadline:
        lists.read(STAR)  # reads do not keep it alive
        time.sleep(0.2)
    assert lists.read(STAR) == {"a"}


# -- capped lists (timelines) -------------------------------------------------------------------


class Nothing:
    """A source with no members: rebuilt lists start empty."""

    def snapshot(self, ref: ListRef) -> Snapshot:
        return Snapshot([], None)


def empty_TokenLists(
    CappedLayout, cache: MemcacheCluster, namespace: str, max_members: int, dirty_min: int
) -> CappedLists:
    settings = ListSettings(
        namespace=namespace, max_members=max_members, dirty_min=dirty_min, compact_write_prob=0
    )
    return TokenLists(CappedLayout, cache, Nothing(), settings)


def test_capped_lists_live_in_one_item_and_keep_the_newest(
    cache: MemcacheCluster, unique: str
) -> None:
    capped = empty_TokenLists(CappedLayout, cache, unique, max_members=5, dirty_min=1)
    ref = ListRef(ListKind.TIMELINE, "reader")
    assert capped.read(ref) == frozenset()  # built (empty) by its reader
    capped.append_tokens({ref: b"".join(b"+%03d " % i for i in range(12))})
    assert capped.stats.appends == 1  # one APPEND, no index
    assert capped.read(ref) == {f"{i:03d}" for i in range(12)}  # compacts as it reads
    assert capped.read(ref) == {f"{i:03d}" for i in range(7, 12)}  # the newest five
    assert cache.get_many([capped.index_key(ref)])[capped.index_key(ref)].count(b"+") == 5


def test_a_capped_list_too_big_for_an_item_is_trimmed_then_appended(
    cache: MemcacheCluster, unique: str
) -> None:
    capped = empty_TokenLists(CappedLayout, cache, unique, max_members=3, dirty_min=10**9)
    ref = ListRef(ListKind.TIMELINE, "reader")
    capped.read(ref)
    member = "m" * 60
    for batch in range(20):  # ~1.3 MB in all: past memcached's item limit
        capped.append_tokens(
            {ref: b"".join(b"+%02d%05d%s " % (batch, i, member.encode()) for i in range(1000))}
        )
    assert capped.stats.compactions >= 1  # trimmed to 3 when an APPEND would not fit
    members = capped.read(ref)  # reads are not trimmed (readers cap), compaction is
    assert {f"19{i:05d}{member}" for i in range(997, 1000)} <= members
    assert len(members) < 20_000 - 1000


def test_a_delivery_appends_to_present_timelines_and_skips_absent_ones(
    cache: MemcacheCluster, unique: str
) -> None:
    capped = empty_TokenLists(CappedLayout, cache, unique, max_members=10, dirty_min=10**9)
    present = ["a", "x:y", "b.c@d"]  # ids may hold ':' and other key-safe punctuation
    for user in present:
        capped.read(ListRef(ListKind.TIMELINE, user))
    capped.deliver(
        [Delivery(b"+p1 ", [*present, "absent"]), Delivery(b"+p2 ", ["absent", "a", "gone"])]
    )
    assert capped.stats.appends == 4 and capped.stats.skipped_absent == 2
    assert capped.read_many([ListRef(ListKind.TIMELINE, u) for u in present]) == {
        ListRef(ListKind.TIMELINE, "a"): {"p1", "p2"},
        ListRef(ListKind.TIMELINE, "x:y"): {"p1"},
        ListRef(ListKind.TIMELINE, "b.c@d"): {"p1"},
    }
    absent = [capped.index_key(ListRef(ListKind.TIMELINE, u)) for u in ("absent", "gone")]
    assert cache.get_many(absent) == {}  # a delivery never creates a timeline


def test_a_delivery_during_a_timeline_rebuild_reaches_what_it_commits(
    cache: MemcacheCluster, unique: str
) -> None:
    """The timeline's item is its own head: deliveries append after the marker, the commit
    keeps them. An invalidation in between breaks the commit instead."""
    settings = ListSettings(namespace=unique, max_members=10, compact_write_prob=0)

    class Old:
        def snapshot(self, ref: ListRef) -> Snapshot:
            return Snapshot(["old"], None)

    rebuilder = TokenLists(CappedLayout, twin(cache), Old(), settings)
    deliverer = TokenLists(CappedLayout, cache, Nothing(), settings)
    ref = ListRef(ListKind.TIMELINE, "reader")
    key = rebuilder.index_key(ref)
    assert rebuilder.layout.claim({key: b"0000cafe"}) == {key}
    deliverer.deliver([Delivery(b"+new ", ["reader"])])
    assert deliverer.stats.appends == 1
    assert rebuilder.layout.commit({key: (b"0000cafe", Old().snapshot(ref))}) == {key}
    assert deliverer.read(ref) == {"old", "new"}
    deliverer.invalidate([ref])  # a second build, invalidated before its commit
    assert rebuilder.layout.claim({key: b"0000beef"}) == {key}
    deliverer.invalidate([ref])
    assert rebuilder.layout.commit({key: (b"0000beef", Old().snapshot(ref))}) == set()


def test_a_delivery_refuses_an_invalid_follower_id_before_any_write(
    cache: MemcacheCluster, unique: str
) -> None:
    capped = empty_TokenLists(CappedLayout, cache, unique, max_members=10, dirty_min=10**9)
    capped.read(ListRef(ListKind.TIMELINE, "a"))
    with pytest.raises(ValueError, match="invalid user id"):
        capped.deliver([Delivery(b"+p1 ", ["a", "b c"])])
    assert capped.read(ListRef(ListKind.TIMELINE, "a")) == frozenset()
