"""Sharded token lists on the real memcached servers of the local stack."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest

from fanout.stack import free_port
from graph import CacheUnavailable, EdgeChange, ListKind, ListRef, ListSettings, ListStore
from graph.cache import MemcacheCluster
from graph.capped_lists import CappedListStore
from graph.lists import Index
from graph.sqlite_edges import SqliteEdgeStore
from tests.graph.contention import STAR, contend, write


def index_of(lists: ListStore, ref: ListRef) -> Index:
    raw = lists.cache.get_many([lists.index_key(ref)])[lists.index_key(ref)]
    return Index.parse(raw)


def test_a_list_larger_than_several_shards_reads_back_exactly(
    sqlite_store: SqliteEdgeStore, lists: ListStore
) -> None:
    lists.read(STAR)  # materialise it: writes only append to lists in the cache
    names = [f"user{i:05d}" for i in range(400)]
    for i in range(0, 400, 7):  # many small batches: rollovers happen on the write path
        write(
            sqlite_store,
            lists,
            [EdgeChange(n, "star", True, i + j) for j, n in enumerate(names[i : i + 7])],
        )
    idx = index_of(lists, STAR)
    assert len(idx.shards) >= 5
    keys = [lists.shard_key(lists.index_key(STAR), idx.gen, n) for n in idx.shards]
    shards = lists.cache.get_many(keys)
    # Soft limit: a shard is closed once it passes the limit, by at most one batch's tokens.
    assert all(len(shards[k]) <= 128 + 7 * len(b"+user00000 ") for k in keys)
    assert lists.read(STAR) == frozenset(names)
    assert lists.stats.rollovers >= 4


def test_rebuild_splits_a_big_list_into_shards(
    sqlite_store: SqliteEdgeStore, lists: ListStore
) -> None:
    names = [f"m{i}" for i in range(300)]
    sqlite_store.apply([EdgeChange(n, "star", True, i) for i, n in enumerate(names)])
    assert lists.read(STAR) == frozenset(names)  # a miss: rebuilt from the store
    assert len(index_of(lists, STAR).shards) > 5
    assert lists.stats.rebuilds == 1


def test_append_to_a_missing_list_never_adds_a_list_of_only_the_new_token(
    sqlite_store: SqliteEdgeStore, lists: ListStore
) -> None:
    write(sqlite_store, lists, [EdgeChange(n, "star", True, i) for i, n in enumerate("abc")])
    lists.cache.flush_all()
    write(sqlite_store, lists, [EdgeChange("d", "star", True, 10)])
    assert lists.read(STAR) == {"a", "b", "c", "d"}


@pytest.mark.parametrize("lose", ["index", "first shard", "newest shard", "counter"])
def test_any_lost_item_yields_the_exact_list(
    sqlite_store: SqliteEdgeStore, lists: ListStore, lose: str
) -> None:
    lists.read(STAR)  # materialise it: writes only append to lists in the cache
    names = [f"n{i:03d}" for i in range(60)]
    for i in range(0, 60, 10):
        write(
            sqlite_store,
            lists,
            [EdgeChange(n, "star", True, i + j) for j, n in enumerate(names[i : i + 10])],
        )
    idx = index_of(lists, STAR)
    first, newest = (
        lists.shard_key(lists.index_key(STAR), idx.gen, n) for n in (idx.shards[0], idx.shards[-1])
    )
    victim = {
        "index": lists.index_key(STAR),
        "first shard": first,
        "newest shard": newest,
        "counter": lists.counter_key(newest),
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


def test_corrupt_list_is_rebuilt(sqlite_store: SqliteEdgeStore, lists: ListStore) -> None:
    lists.read(STAR)  # materialise it: writes only append to lists in the cache
    write(sqlite_store, lists, [EdgeChange("a", "star", True, 1)])
    idx = index_of(lists, STAR)
    lists.cache.append_many(
        {lists.shard_key(lists.index_key(STAR), idx.gen, idx.shards[-1]): b"garbage "}
    )
    assert lists.read(STAR) == {"a"}
    assert lists.stats.invalidations == 1


def test_flush_of_every_server_mid_run_still_yields_exact_lists(
    sqlite_store: SqliteEdgeStore, lists: ListStore
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
    for kind, pick, other in ((ListKind.FOLLOWERS, 1, 0), (ListKind.FOLLOWING, 0, 1)):
        users = {edge[pick] for edge in model}
        got = lists.read_many([ListRef(kind, u) for u in users])
        for user in users:
            expected = {e[other] for e, on in model.items() if on and e[pick] == user}
            assert got[ListRef(kind, user)] == expected, (kind, user)


def test_dirty_list_is_compacted_on_read(sqlite_store: SqliteEdgeStore, lists: ListStore) -> None:
    lists.read(STAR)  # materialise it: writes only append to lists in the cache
    for round_ in range(6):
        write(
            sqlite_store,
            lists,
            [EdgeChange(f"x{i}", "star", round_ % 2 == 0, round_ * 100 + i) for i in range(20)],
        )
    # 20 adds, then remove/add/remove/add/remove: 120 tokens, 0 members
    idx = index_of(lists, STAR)
    keys = [lists.shard_key(lists.index_key(STAR), idx.gen, n) for n in idx.shards]
    before = sum(len(v) for v in lists.cache.get_many(keys).values())
    assert lists.read(STAR) == frozenset()
    after = sum(len(v) for v in lists.cache.get_many(keys).values())
    assert lists.stats.compactions == 1 and after == 0 < before
    write(sqlite_store, lists, [EdgeChange("x1", "star", True, 1000)])
    assert lists.read(STAR) == {"x1"}


def test_compaction_that_loses_the_cas_race_gives_up_and_drops_nothing(
    sqlite_store: SqliteEdgeStore, lists: ListStore
) -> None:
    lists.read(STAR)  # materialise it: writes only append to lists in the cache
    write(sqlite_store, lists, [EdgeChange(f"x{i}", "star", True, i) for i in range(10)])
    write(sqlite_store, lists, [EdgeChange(f"x{i}", "star", False, 100 + i) for i in range(10)])
    idx = index_of(lists, STAR)
    keys = [lists.shard_key(lists.index_key(STAR), idx.gen, n) for n in idx.shards]
    snapshot = lists.cache.gets_many(keys)
    # A writer appends between the compactor's gets and its cas.
    write(sqlite_store, lists, [EdgeChange("racer", "star", True, 500)])
    assert lists._compact(keys, [snapshot[k] for k in keys]) is False
    assert lists.stats.compactions_lost == 1
    assert lists.read(STAR) == {"racer"}


def test_a_herd_waits_for_the_rebuild_in_progress(
    sqlite_store: SqliteEdgeStore, cache: MemcacheCluster, unique: str
) -> None:
    settings = ListSettings(namespace=unique)
    sqlite_store.apply([EdgeChange("a", "star", True, 1)])
    queries: list[ListRef] = []

    class CountingSource:
        def all_members(self, ref: ListRef) -> list[str]:
            queries.append(ref)
            return sqlite_store.all_members(ref)

    other_client = MemcacheCluster(
        [("127.0.0.1", int(s.rpartition(":")[2])) for s in cache.servers]
    )

    class Snapshot:  # what the lease holder read from the store
        def all_members(self, ref: ListRef) -> list[str]:
            return ["a"]

    holder = ListStore(other_client, Snapshot(), settings)
    lease = holder.index_key(STAR) + b":rb"
    assert cache.add_many({lease: b"1"}, expire=10)[lease]  # someone is rebuilding
    finisher = threading.Timer(0.3, holder._build_many, args=([STAR],))
    finisher.start()
    herd = ListStore(cache, CountingSource(), settings)
    assert herd.read(STAR) == {"a"}
    finisher.join()
    assert queries == []  # the herd never queried the store


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


def test_stale_writer_after_a_newer_token_is_the_documented_hole(
    sqlite_store: SqliteEdgeStore, lists: ListStore
) -> None:
    """A zombie consumer (revoked but still running) can append an old token after a newer one.
    The store is right; the list is wrong until it is rebuilt (``fanout rebuild-cache``)."""
    lists.read(STAR)  # materialise it: writes only append to lists in the cache
    write(sqlite_store, lists, [EdgeChange("x", "star", True, 1)])
    write(sqlite_store, lists, [EdgeChange("x", "star", False, 2)])
    lists.apply({STAR: [(True, "x")]})  # the zombie's late append of the older event
    assert lists.read(STAR) == {"x"} and sqlite_store.followers("star") == []
    lists.rebuild(STAR, force=True)
    assert lists.read(STAR) == frozenset()


def test_a_server_that_is_down_is_an_error_not_a_shorter_list(
    sqlite_store: SqliteEdgeStore, unique: str
) -> None:
    down = MemcacheCluster([("127.0.0.1", free_port())], timeout=0.5)
    lists = ListStore(down, sqlite_store, ListSettings(namespace=unique))
    sqlite_store.apply([EdgeChange("a", "star", True, 1)])
    with pytest.raises(CacheUnavailable):
        lists.read(STAR)
    with pytest.raises(CacheUnavailable):
        lists.apply({STAR: [(True, "a")]})


@pytest.mark.parametrize(
    "user", ["a b", "a\nb", "a\r\n", "ctl\x01", "ctl\x1f", "x" * 65, "", "k\x7f", "ü"]
)
def test_no_unvalidated_input_reaches_a_memcached_key(lists: ListStore, user: str) -> None:
    """pymemcache itself lets \\x01..\\x1f through; the list layer refuses them first."""
    with pytest.raises(ValueError):
        lists.index_key(ListRef(ListKind.FOLLOWERS, user))
    with pytest.raises(ValueError):
        lists.read(ListRef(ListKind.FOLLOWING, user))


def test_writes_skip_absent_lists_and_readers_build_them(
    sqlite_store: SqliteEdgeStore, cache: MemcacheCluster, unique: str
) -> None:
    settings = ListSettings(namespace=unique, compact_write_prob=1.0)  # would read: must not
    lazy = ListStore(cache, sqlite_store, settings)
    sqlite_store.apply([EdgeChange("a", "star", True, 1)])
    lazy.apply({STAR: [(True, "a")]})
    assert lazy.stats.skipped_absent == 1 and lazy.stats.rebuilds == 0
    assert lists_key_absent(lazy)
    assert lazy.read(STAR) == {"a"}  # the reader builds it from the store
    sqlite_store.apply([EdgeChange("b", "star", True, 2)])
    lazy.apply({STAR: [(True, "b")]})  # now it exists: appended
    assert lazy.stats.appends == 1 and lazy.read(STAR) == {"a", "b"}


def test_a_skipped_write_waits_for_a_rebuild_in_progress(
    sqlite_store: SqliteEdgeStore, cache: MemcacheCluster, unique: str
) -> None:
    """The rebuild holding the lease read the store before our write: we must append to it."""
    settings = ListSettings(namespace=unique, compact_write_prob=0)
    other_client = MemcacheCluster(
        [("127.0.0.1", int(s.rpartition(":")[2])) for s in cache.servers]
    )

    class Snapshot:  # the store as the rebuilder read it: before "b"
        def all_members(self, ref: ListRef) -> list[str]:
            return ["a"]

    rebuilder = ListStore(other_client, Snapshot(), settings)
    lease = rebuilder.index_key(STAR) + b":rb"
    assert cache.add_many({lease: b"1"}, expire=10)[lease]
    finisher = threading.Timer(0.3, rebuilder._build_many, args=([STAR],))
    finisher.start()
    lazy = ListStore(cache, sqlite_store, settings)
    sqlite_store.apply([EdgeChange("a", "star", True, 1), EdgeChange("b", "star", True, 2)])
    lazy.apply({STAR: [(True, "b")]})
    finisher.join()
    assert lazy.stats.skipped_absent == 0
    assert lazy.read(STAR) == {"a", "b"}


def lists_key_absent(lists: ListStore) -> bool:
    return lists.index_key(STAR) not in lists.cache.get_many([lists.index_key(STAR)])


class Nothing:
    """A source with no members: rebuilt lists start empty."""

    def all_members(self, ref: ListRef) -> list[str]:
        return []


def empty_capped_lists(
    cache: MemcacheCluster, namespace: str, max_members: int, dirty_min: int
) -> CappedListStore:
    settings = ListSettings(
        namespace=namespace, max_members=max_members, dirty_min=dirty_min, compact_write_prob=0
    )
    return CappedListStore(cache, Nothing(), settings)


def test_capped_lists_live_in_one_item_and_keep_the_newest(
    sqlite_store: SqliteEdgeStore, cache: MemcacheCluster, unique: str
) -> None:
    capped = empty_capped_lists(cache, unique, max_members=5, dirty_min=1)
    ref = ListRef(ListKind.TIMELINE, "reader")
    assert capped.read(ref) == frozenset()  # built (empty) by its reader
    capped.apply({ref: [(True, f"{i:03d}") for i in range(12)]})
    assert capped.stats.appends == 1  # one APPEND, no index
    assert capped.read(ref) == {f"{i:03d}" for i in range(12)}  # compacts as it reads
    assert capped.read(ref) == {f"{i:03d}" for i in range(7, 12)}  # the newest five
    assert cache.get_many([capped.index_key(ref)])[capped.index_key(ref)].count(b"+") == 5


def test_a_capped_list_too_big_for_an_item_is_trimmed_then_appended(
    cache: MemcacheCluster, unique: str
) -> None:
    capped = empty_capped_lists(cache, unique, max_members=3, dirty_min=10**9)
    ref = ListRef(ListKind.TIMELINE, "reader")
    capped.read(ref)
    member = "m" * 60
    for batch in range(20):  # ~1.3 MB in all: past memcached's item limit
        capped.apply({ref: [(True, f"{batch:02d}{i:05d}{member}") for i in range(1000)]})
    assert capped.stats.compactions >= 1  # trimmed to 3 when an APPEND would not fit
    members = capped.read(ref)  # reads are not trimmed (readers cap), compaction is
    assert {f"19{i:05d}{member}" for i in range(997, 1000)} <= members
    assert len(members) < 20_000 - 1000


def test_a_delivery_appends_to_present_timelines_and_skips_absent_ones(
    cache: MemcacheCluster, unique: str
) -> None:
    capped = empty_capped_lists(cache, unique, max_members=10, dirty_min=10**9)
    present = ["a", "x:y", "b.c@d"]  # ids may hold ':' and other key-safe punctuation
    for user in present:
        capped.read(ListRef(ListKind.TIMELINE, user))
    capped.deliver([(b"+p1 ", [*present, "absent"]), (b"+p2 ", ["absent", "a", "gone"])])
    assert capped.stats.appends == 4 and capped.stats.skipped_absent == 2
    assert capped.read_many([ListRef(ListKind.TIMELINE, u) for u in present]) == {
        ListRef(ListKind.TIMELINE, "a"): {"p1", "p2"},
        ListRef(ListKind.TIMELINE, "x:y"): {"p1"},
        ListRef(ListKind.TIMELINE, "b.c@d"): {"p1"},
    }
    absent = [capped.index_key(ListRef(ListKind.TIMELINE, u)) for u in ("absent", "gone")]
    assert cache.get_many(absent) == {}  # a delivery never creates a timeline


def test_a_delivery_refuses_an_invalid_follower_id_before_any_write(
    cache: MemcacheCluster, unique: str
) -> None:
    capped = empty_capped_lists(cache, unique, max_members=10, dirty_min=10**9)
    capped.read(ListRef(ListKind.TIMELINE, "a"))
    with pytest.raises(ValueError, match="invalid user id"):
        capped.deliver([(b"+p1 ", ["a", "b c"])])
    assert capped.read(ListRef(ListKind.TIMELINE, "a")) == frozenset()
