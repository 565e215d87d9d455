"""Servers added and removed while writers and readers run, each process switching ring state
at its own moment (memcache/ring.py): lists stay exact in every process, through a change and
its reversal, and copies left behind by a move are never served again.

Against real memcached processes of the test's own. Each process reads the shared ring record
on a clock of its own, so the test decides when each one switches: the mixes the operator's
waits allow (neighbouring states) are made here one by one."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import cast

import pytest

from tests.held_ring import HeldRing
from timeline_fanout.consumers.graph_apply import GraphApplier, Recorded
from timeline_fanout.graph import ListSettings, ShardedLists
from timeline_fanout.graph.lists.sharded import ShardedLayout
from timeline_fanout.graph.lists.token_lists import TokenLists
from timeline_fanout.graph.model.edges import EdgeChange, Snapshot
from timeline_fanout.graph.model.keys import KeySpace, ListKind, ListRef
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore
from timeline_fanout.memcache import CacheUnavailable, Item, MemcacheCluster
from timeline_fanout.memcache.ring import RingRecord, RingSource, RingView
from timeline_fanout.memcache.trust import ServerTrust
from timeline_fanout_devstack.memcached_processes import own_server

from .test_failover import BOUNDS, USERS, Graph, Server, refs

LEASE_S = 3600.0  # a process switches only when the test moves its clock


@pytest.fixture
def four() -> Iterator[list[Server]]:
    with own_server() as a, own_server() as b, own_server() as c, own_server() as d:
        yield [a, b, c, d]


def names(servers: list[Server]) -> tuple[str, ...]:
    return tuple(sorted(f"{host}:{port}" for _, (host, port) in servers))


class Process:
    """One process of the product: its own trust, its ring view on a clock of its own."""

    def __init__(
        self, servers: list[Server], source: RingSource, store: SqliteEdgeStore, ns: str
    ) -> None:
        self.now = 0.0
        first = RingRecord.of(names(servers))
        view = RingView(first, source, LEASE_S, clock=lambda: self.now, families=KeySpace.families)
        trust = ServerTrust(list(first.servers), BOUNDS, ring=view)
        cache = MemcacheCluster([address for _, address in servers], trust=trust)
        settings = ListSettings(namespace=ns, compact_write_prob=0.2)
        self.lists: ShardedLists = TokenLists(ShardedLayout, cache, store, settings)
        self.view = view

    def switch(self) -> None:
        """Reads the shared record again at its next use."""
        self.now += LEASE_S

    @property
    def state(self) -> tuple[int, bool]:
        self.lists.cache.available([b"probe"])  # uses the cache: reads the record if due
        return self.view.record.version, self.view.record.moving


class Writers:
    """The graph consumer's writes (the store, then the lists as ``GraphApplier`` writes
    them); a batch whose cache write is refused (keys moving) is kept and made again, as the
    consumer retries a batch it did not commit."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.pending: list[tuple[Process, Recorded]] = []

    def write(self, process: Process, events: int) -> None:
        live = self.graph.changes(events)
        users = {u for c in live for u in (c.follower, c.followee)}
        self._apply(process, Recorded(len(live), live, 0, users))

    def _apply(self, process: Process, recorded: Recorded) -> bool:
        try:
            GraphApplier(self.graph.store, process.lists).update_lists(recorded)
        except CacheUnavailable:
            self.pending.append((process, recorded))
            return False
        return True

    def retry(self) -> int:
        """The kept batches made again; how many were refused again."""
        kept, self.pending = self.pending, []
        for process, recorded in kept:
            self._apply(process, recorded)
        return len(self.pending)

    def touched(self) -> set[ListRef]:
        return {
            ListRef(kind, user)
            for _, recorded in self.pending
            for c in recorded.live
            for kind, user in ((ListKind.FOLLOWERS, c.followee), (ListKind.FOLLOWING, c.follower))
        }


def wrong(process: Process, store: SqliteEdgeStore, unapplied: set[ListRef]) -> list[ListRef]:
    """The lists ``process`` reads differently from the store, among those no unapplied
    batch touches (those lag: their batch is not committed yet)."""
    read = process.lists.read_many(refs())
    return [
        ref
        for ref in refs()
        if ref not in unapplied and read[ref] != frozenset(store.all_members(ref))
    ]


def test_lists_stay_exact_through_a_server_added_and_removed_with_processes_in_mixed_states(
    four: list[Server], sqlite_store: SqliteEdgeStore, unique: str
) -> None:
    three = four[:3]
    source = HeldRing(RingRecord.of(names(three)))
    writers = Writers(Graph(sqlite_store, 7))
    w1, w2, r1, r2 = (Process(three, source, sqlite_store, unique) for _ in range(4))
    every = (w1, w2, r1, r2)
    writers.write(w1, 400)
    for p in every:
        assert p.state == (1, False)
        assert wrong(p, sqlite_store, set()) == []  # every list cached on the first three

    def exact(unapplied: set[ListRef]) -> None:
        for p in every:
            assert wrong(p, sqlite_store, unapplied) == [], p.state

    def move(to: tuple[str, ...], order: tuple[Process, ...]) -> None:
        """The operator's change, with the processes switching in ``order``, writes and
        reads in every mix of neighbouring states along the way."""
        record = source.record
        assert record is not None
        moving = record.moved_to(to)
        assert source.swap_ring(record, moving)
        for p in order:  # stable and moving together
            p.switch()
            writers.write(w1, 60)
            writers.write(w2, 60)
            exact(writers.touched())
        assert {p.state for p in every} == {(moving.version, True)}
        assert source.swap_ring(moving, moving.settled())
        for p in reversed(order):  # moving and stable together
            p.switch()
            writers.write(w1, 60)
            writers.write(w2, 60)
            exact(writers.touched())
            writers.retry()
        assert {p.state for p in every} == {(moving.version, False)}
        assert writers.retry() == 0
        exact(set())

    move(names(four), (w2, r2, w1, r1))  # a fourth server
    assert writers.graph.pos > 0
    move(names(three), (r1, w1, r2, w2))  # and away again: its lists' old copies come back
    writers.write(w1, 200)
    writers.write(w2, 200)
    assert writers.pending == []
    exact(set())
    newcomer = Process(three, source, sqlite_store, unique)
    assert newcomer.state == (3, False)
    assert wrong(newcomer, sqlite_store, set()) == []


def test_a_write_to_a_moving_list_is_refused_not_skipped(
    four: list[Server], sqlite_store: SqliteEdgeStore, unique: str
) -> None:
    """A moving process must not commit a write it could not make: the copy a process still
    stable at the old version reads would miss it for good."""
    source = HeldRing(RingRecord.of(names(four[:3])))
    writer = Process(four[:3], source, sqlite_store, unique)
    graph = Graph(sqlite_store, 8)
    Writers(graph).write(writer, 300)
    record = source.record
    assert record is not None and source.swap_ring(record, record.moved_to(names(four)))
    writer.switch()
    refused = 0
    for user in USERS:
        tokens = {ListRef(ListKind.FOLLOWERS, user): [(True, "zz", graph.pos + 1)]}
        try:
            writer.lists.apply(tokens)
        except CacheUnavailable:
            refused += 1
    assert 0 < refused < len(USERS)  # the moving lists' writes, and only theirs


class MovesOnSnapshot:
    """The edge store, through which the ring begins moving just as a build reads it: after
    the build's claims, before its commit (the process's lease on the record runs out then)."""

    def __init__(self, store: SqliteEdgeStore, source: HeldRing, target: tuple[str, ...]) -> None:
        self.store, self.source, self.target = store, source, target
        self.process: Process | None = None

    def snapshot(self, ref: ListRef) -> Snapshot:
        record = self.source.record
        if self.process is not None and record is not None and not record.moving:
            assert self.source.swap_ring(record, record.moved_to(self.target))
            self.process.switch()
        return self.store.snapshot(ref)


def test_a_list_whose_items_begin_moving_during_its_build_is_answered_from_the_store(
    four: list[Server], sqlite_store: SqliteEdgeStore, unique: str
) -> None:
    """A reader whose ring lease runs out between its claim and its commit finds the list's
    items moving: the commit is not sent (``KeysMoving``), and the reader answers from the
    store instead of failing."""
    Graph(sqlite_store, 9).changes(300)
    source = HeldRing(RingRecord.of(names(four[:3])))
    store = MovesOnSnapshot(sqlite_store, source, names(four))
    reader = Process(four[:3], source, cast(SqliteEdgeStore, store), unique)
    cast(MemcacheCluster, reader.lists.cache).settle()
    store.process = reader
    builds = reader.lists.stats.rebuilds
    read = reader.lists.read_many(refs())
    assert read == {ref: frozenset(sqlite_store.all_members(ref)) for ref in refs()}
    moving = reader.lists.cache.available(reader.lists.index_keys(refs()))
    assert source.record is not None and source.record.moving
    assert 0 < moving.count(False) < len(refs())  # some builds met their items moving
    assert reader.lists.stats.rebuilds - builds == moving.count(True)  # the others committed


def test_a_write_that_read_a_moving_head_is_refused_after_its_process_moved_on(
    four: list[Server], sqlite_store: SqliteEdgeStore, unique: str
) -> None:
    """A writer's lease on the record runs out mid-write, between its read of the heads (made
    while moving: a moved list's head reads as missing, its write is skipped) and the end of
    the write (made stable at the new version, where the list moves no more): the skip was
    not an absence, and the new copy, built before the write's store step, lacks it. The write
    is refused, not committed."""
    source = HeldRing(RingRecord.of(names(four[:3])))
    graph = Graph(sqlite_store, 11)
    writer = Process(four[:3], source, sqlite_store, unique)
    reader = Process(four[:3], source, sqlite_store, unique)
    Writers(graph).write(writer, 300)
    record = source.record
    assert record is not None
    moving = record.moved_to(names(four))
    assert source.swap_ring(record, moving)
    writer.switch()
    reader.switch()
    assert writer.state == reader.state == (2, True)
    assert source.swap_ring(moving, moving.settled())
    reader.switch()
    assert reader.state == (2, False)
    cast(MemcacheCluster, reader.lists.cache).settle()
    assert wrong(reader, sqlite_store, set()) == []  # the moved lists built on their new server
    moved = [
        ref
        for ref, ok in zip(
            refs(), writer.lists.cache.available(writer.lists.index_keys(refs())), strict=True
        )
        if not ok and ref.kind is ListKind.FOLLOWERS
    ]
    assert moved
    live = sqlite_store.apply([EdgeChange("zz", moved[0].user, True, graph.pos + 1)])
    cache = cast(MemcacheCluster, writer.lists.cache)
    heads = cache.gets_many

    def heads_then_lease_runs_out(keys: Iterable[bytes]) -> dict[bytes, Item]:
        found = heads(keys)
        writer.switch()
        cache.gets_many = heads  # type: ignore[method-assign]
        return found

    cache.gets_many = heads_then_lease_runs_out  # type: ignore[method-assign]
    recorded = Recorded(len(live), live, 0, {"zz", moved[0].user})
    with pytest.raises(CacheUnavailable):
        GraphApplier(sqlite_store, writer.lists).update_lists(recorded)
    assert writer.state == (2, False)
    GraphApplier(sqlite_store, writer.lists).update_lists(recorded)  # the consumer's retry
    assert wrong(reader, sqlite_store, set()) == []
