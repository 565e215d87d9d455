"""Follower and following counts against real memcached and every edge store: a cached count
follows the store after every graph batch, and no fill that counted before a write ever commits
its count after it (the fence, graph/lists/counts.py). Each race is made deterministic by
running the other side inside the store call that the fence puts after its ``gets``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tests.consumers.test_graph_apply import follow, removed, unfollow
from tests.held_ring import HeldRing
from timeline_fanout.consumers.graph_apply import GraphApplier
from timeline_fanout.graph import ListSettings, ShardedLists
from timeline_fanout.graph.lists.counts import CachedCounts, CountSource, KeptCounts, list_counts
from timeline_fanout.graph.lists.sharded import ShardedLayout
from timeline_fanout.graph.lists.token_lists import TokenLists
from timeline_fanout.graph.model.edges import EdgeCounts, EdgeStore
from timeline_fanout.graph.model.keys import KeySpace
from timeline_fanout.graph.stores.mongo import MongoEdgeStore
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore
from timeline_fanout.memcache import MemcacheCluster
from timeline_fanout.memcache.ring import MOVED, Placement, RingRecord, RingView
from timeline_fanout.memcache.trust import ServerTrust, TrustSettings
from timeline_fanout_devstack.memcached_processes import own_server


class RacedStore(SqliteEdgeStore):
    """Runs ``meanwhile`` once, right after its next recount answered: what the graph consumer
    does between a reader's count and its CAS. ``recounts``: how many it answered."""

    meanwhile: Callable[[], None] | None = None
    recounts = 0

    def recounted(self, user: str) -> EdgeCounts:
        self.recounts += 1
        counted = super().recounted(user)
        run, self.meanwhile = self.meanwhile, None
        if run is not None:
            run()
        return counted


def lists_on(cache: MemcacheCluster, store: EdgeStore, namespace: str) -> ShardedLists:
    return TokenLists(
        ShardedLayout, cache, store, ListSettings(namespace=namespace, compact_write_prob=0)
    )


@pytest.fixture
def raced(
    tmp_path: Path, cache: MemcacheCluster, unique: str
) -> tuple[RacedStore, GraphApplier, CachedCounts]:
    store = RacedStore(tmp_path / "edges.db")
    lists = lists_on(cache, store, unique)
    counts = CachedCounts(cache, store, lists.keys, 3600, recount_s=0)
    return store, GraphApplier(store, lists, counts), counts


def test_the_store_that_keeps_counts_is_asked_directly_and_the_others_are_cached(
    edge_store: EdgeStore, cache: MemcacheCluster, unique: str
) -> None:
    counts = list_counts(edge_store, lists_on(cache, edge_store, unique))
    assert isinstance(counts, KeptCounts if edge_store.counts_kept else CachedCounts)


def test_counts_follow_the_store_after_every_batch(
    edge_store: EdgeStore, cache: MemcacheCluster, unique: str
) -> None:
    lists = lists_on(cache, edge_store, unique)
    counts: CountSource = (
        KeptCounts(edge_store)
        if edge_store.counts_kept
        else CachedCounts(cache, edge_store, lists.keys, 3600, recount_s=0)
    )
    applier = GraphApplier(edge_store, lists, counts)
    batches = [
        [follow("a", "star", 1), follow("b", "star", 2), follow("a", "b", 3)],
        [unfollow("a", "star", 4), follow("c", "star", 5)],
        [follow("a", "star", 6), follow("a", "star", 7)],  # a redelivery changes nothing
        [removed("b", 8)],
        [follow("d", "star", 9), unfollow("d", "star", 10), unfollow("zed", "star", 11)],
    ]
    users = ["star", "a", "b", "c", "d", "zed"]
    for batch in batches:
        before = {u: counts.counts(u) for u in users}  # cached, so a stale one would show
        applier.apply(batch)
        after = {u: counts.counts(u) for u in users}
        assert after == {u: edge_store.recounted(u) for u in users}, (batch, before)
    assert counts.counts("star") == EdgeCounts(2, 0)
    assert counts.counts("a") == EdgeCounts(0, 1)


def test_a_fill_that_counted_before_a_write_never_commits_its_count(
    raced: tuple[RacedStore, GraphApplier, CachedCounts],
) -> None:
    store, applier, counts = raced
    applier.apply([follow("a", "star", 1)])
    store.meanwhile = lambda: applier.apply([follow("b", "star", 2)])
    assert counts.counts("star") == EdgeCounts(1, 0)  # counted concurrently with the follow
    assert counts.counts("star") == EdgeCounts(2, 0)  # its CAS failed: counted again
    assert counts.counts("star") == EdgeCounts(2, 0)  # and cached from then on


def test_a_write_whose_store_part_ran_but_whose_batch_crashed_is_counted_on_redelivery(
    raced: tuple[RacedStore, GraphApplier, CachedCounts],
) -> None:
    store, applier, counts = raced
    applier.apply([follow("a", "star", 1)])
    assert counts.counts("star") == EdgeCounts(1, 0)
    applier.record([follow("b", "star", 2)])  # the store's part; the process dies here
    assert counts.counts("star") == EdgeCounts(1, 0)  # stale until the batch is applied
    applier.apply([follow("b", "star", 2)])  # redelivered: the store refuses nothing new
    assert counts.counts("star") == EdgeCounts(2, 0) == store.recounted("star")


def test_a_follow_switched_off_by_a_removal_committed_meanwhile_marks_its_counts(
    edge_store: EdgeStore, cache: MemcacheCluster, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``follow X->Y`` (keyed by Y) and ``user_removed X`` (keyed by X) are applied by two
    consumers at once: the Mongo store writes the follow, finds the removal and switches the
    edge off again (graph/stores/mongo.py), and does not answer it as written. A reader that
    counted Y in between counted X; the follow's batch must mark Y's count all the same."""
    if not isinstance(edge_store, MongoEdgeStore):
        pytest.skip("the SQLite store writes a batch in one transaction: no moment in between")
    lists = lists_on(cache, edge_store, unique)
    counts = CachedCounts(cache, edge_store, lists.keys, 3600, recount_s=0)
    applier = GraphApplier(edge_store, lists, counts)
    applier.apply([follow("f1", "Y", 1), follow("f2", "Y", 2), follow("X", "Z", 3)])
    removals = edge_store._removed
    calls = 0

    def raced(users: set[str]) -> dict[str, int]:
        nonlocal calls
        calls += 1
        if calls == 1:  # the follow's check before its write: the removal's batch runs whole
            found = removals(users)
            with monkeypatch.context() as inside:
                inside.setattr(edge_store, "_removed", removals)
                applier.apply([removed("X", 100)])
            return found
        if calls == 2:  # written, not yet switched off: a reader counts Y now
            assert counts.counts("Y") == EdgeCounts(3, 0)
        return removals(users)

    monkeypatch.setattr(edge_store, "_removed", raced)
    applier.apply([follow("X", "Y", 50)])
    monkeypatch.setattr(edge_store, "_removed", removals)
    assert calls == 2
    assert counts.counts("Y") == EdgeCounts(2, 0) == edge_store.recounted("Y")


def test_a_stale_count_is_counted_by_one_reader_and_answered_stale_to_the_others(
    raced: tuple[RacedStore, GraphApplier, CachedCounts], cache: MemcacheCluster
) -> None:
    """Changes that change nothing (an unfollow of someone never followed) and many readers
    after each: the list is counted once per lease, not once per change or per reader."""
    store, applier, _ = raced
    leased = CachedCounts(cache, store, applier.lists.keys, 3600, recount_s=60)
    applier.apply([follow("a", "star", 1), follow("b", "star", 2)])
    assert leased.counts("star") == EdgeCounts(2, 0)
    counted = store.recounts
    for pos in range(10, 30):
        applier.apply([unfollow("attacker", "star", pos)])
        assert leased.counts("star") == EdgeCounts(2, 0)  # stale, and right
    applier.apply([follow("c", "star", 40)])
    readers = [CachedCounts(cache, store, applier.lists.keys, 3600, recount_s=60) for _ in range(8)]
    assert {r.counts("star") for r in readers} == {EdgeCounts(2, 0)}  # the lease is held
    assert store.recounts == counted
    cache.delete_many(applier.lists.keys.count_lease_keys(["star"]))  # the lease expires
    assert leased.counts("star") == EdgeCounts(3, 0)  # elected: counted, and answered
    assert store.recounts == counted + 1
    assert {r.counts("star") for r in readers} == {EdgeCounts(3, 0)}  # fresh for everyone


def test_a_first_count_that_a_batch_interrupted_is_left_stale_for_the_other_readers(
    raced: tuple[RacedStore, GraphApplier, CachedCounts], cache: MemcacheCluster
) -> None:
    """No count cached yet, and a batch lands during the elected reader's count, as it does for
    a user whose changes come faster than a count: the others must still get a value to
    answer, not count the store each."""
    store, applier, _ = raced
    keys = applier.lists.keys
    leased = CachedCounts(cache, store, keys, 3600, recount_s=60)
    applier.apply([follow("a", "star", 1)])
    store.meanwhile = lambda: applier.apply([follow("b", "star", 2)])
    assert leased.counts("star") == EdgeCounts(1, 0)  # counted before the follow landed
    assert cache.get_many([leased.key("star")]) == {leased.key("star"): b"c 1 0 s"}
    counted = store.recounts
    others = [CachedCounts(cache, store, keys, 3600, recount_s=60) for _ in range(4)]
    assert {r.counts("star") for r in others} == {EdgeCounts(1, 0)}  # stale, none counted
    assert store.recounts == counted
    cache.delete_many(keys.count_lease_keys(["star"]))  # the lease expires, and batches land
    store.meanwhile = lambda: applier.apply([follow("c", "star", 3)])  # during the next count
    assert others[0].counts("star") == EdgeCounts(2, 0)
    assert cache.get_many([leased.key("star")]) == {leased.key("star"): b"c 2 0 s"}  # newest
    assert {r.counts("star") for r in others[1:]} == {EdgeCounts(2, 0)}
    cache.delete_many(keys.count_lease_keys(["star"]))
    assert others[0].counts("star") == EdgeCounts(3, 0)


def test_an_eviction_or_a_restart_between_gets_and_cas_commits_nothing(
    raced: tuple[RacedStore, GraphApplier, CachedCounts], cache: MemcacheCluster
) -> None:
    store, applier, counts = raced
    applier.apply([follow("a", "star", 1)])
    key = counts.key("star")

    def evicted_then_written() -> None:
        cache.delete_many([key])  # the item is gone (an eviction, a restart)...
        applier.record([follow("b", "star", 2)])  # ...and a write lands in the store

    store.meanwhile = evicted_then_written
    assert counts.counts("star") == EdgeCounts(1, 0)
    assert cache.get_many([key]) == {}  # the CAS found nothing: nothing committed
    assert counts.counts("star") == EdgeCounts(2, 0)


def test_readers_filling_at_once_commit_one_count_and_a_left_marker_is_filled(
    raced: tuple[RacedStore, GraphApplier, CachedCounts], cache: MemcacheCluster
) -> None:
    store, applier, counts = raced
    applier.apply([follow("a", "star", 1), follow("b", "star", 2)])
    other = CachedCounts(cache, store, applier.lists.keys, 3600, recount_s=0)
    store.meanwhile = lambda: other.counts("star")  # a second reader fills inside the first
    assert counts.counts("star") == EdgeCounts(2, 0)
    assert cache.get_many([counts.key("star")]) == {counts.key("star"): b"c 2 0"}
    cache.set_many({counts.key("star"): b"~"})  # a reader crashed mid-fill
    assert counts.counts("star") == EdgeCounts(2, 0)
    assert cache.get_many([counts.key("star")]) == {counts.key("star"): b"c 2 0"}


@pytest.mark.parametrize("garbage", [b"c 1", b"c x 2", b"c -1 2", b"\xff", b"~ s", b"c 1 0 sx"])
def test_bytes_that_are_not_a_count_are_counted_again(
    raced: tuple[RacedStore, GraphApplier, CachedCounts], cache: MemcacheCluster, garbage: bytes
) -> None:
    _, applier, counts = raced
    applier.apply([follow("a", "star", 1)])
    cache.set_many({counts.key("star"): garbage})
    assert counts.counts("star") == EdgeCounts(1, 0)
    assert cache.get_many([counts.key("star")]) == {counts.key("star"): b"c 1 0"}  # repaired


class CaughtUp:
    """A store the consumers have caught up with: five followers, seven followed."""

    counts_kept = False

    def recounted(self, user: str) -> EdgeCounts:
        return EdgeCounts(5, 7)


class MovesAfterACheck(MemcacheCluster):
    """Runs ``then`` once, right after its next ``available`` answered: a ring change that
    begins between a reader's check of the recount lease and its ADD."""

    then: Callable[[], None] | None = None

    def available(self, keys: Sequence[bytes]) -> list[bool]:
        got = super().available(keys)
        run, self.then = self.then, None
        if run is not None:
            run()
        return got


def test_a_recount_lease_that_began_moving_elects_the_reader_and_the_store_is_counted() -> None:
    with contextlib.ExitStack() as servers:
        four = [servers.enter_context(own_server())[1] for _ in range(4)]
        names = sorted(f"{host}:{port}" for host, port in four)
        now = [0.0]
        register = HeldRing(RingRecord.of(names[:3]))
        view = RingView(
            RingRecord.of(names[:3]),
            register,
            10.0,
            clock=lambda: now[0],
            families=KeySpace.families,
        )
        trust = ServerTrust(names[:3], TrustSettings(timeout_s=0.5), ring=view)
        cache = MovesAfterACheck(
            [(h, int(p)) for h, p in (n.rsplit(":", 1) for n in names[:3])], trust=trust
        )
        cache.settle()
        keys = KeySpace("moving-lease")
        record = register.record
        assert record is not None
        moving = record.moved_to(names)
        placement = Placement(moving, KeySpace.families)
        user = next(
            u
            for u in (f"u{i}" for i in range(5000))
            if placement.owners(keys.count_lease_keys([u]))[0] == MOVED
            and placement.owners(keys.count_keys([u]))[0] != MOVED
        )
        counts = CachedCounts(cache, CaughtUp(), keys, 60, recount_s=1)  # type: ignore[arg-type]
        cache.set_many({keys.count_keys([user])[0]: b"c 1 1 s"})  # marked stale by a batch

        def change() -> None:
            assert register.swap_ring(record, moving)
            now[0] += 10.0  # this process's lease runs out: the next use reads the change

        cache.then = change
        assert counts.counts(user) == EdgeCounts(5, 7)  # no reader holds the lease: counted
        cache.close()
