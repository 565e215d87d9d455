"""One memcached server of three killed, restarted empty, hung (SIGSTOP) and resumed with the
items it held: lists keep being written and read exact throughout, and a resumed server's
stale items are never served, to the writer or to a reader that never saw it go away.

Against real memcached processes of the test's own (docs/design/cache-failover.md)."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator
from typing import Any, cast

import pytest

from tests.held_ring import HeldRing, process_trust
from timeline_fanout.graph import ListSettings, ShardedLists
from timeline_fanout.graph.lists.capped import CappedLayout
from timeline_fanout.graph.lists.sharded import ShardedLayout
from timeline_fanout.graph.lists.token_lists import Delivery, TokenLists
from timeline_fanout.graph.lists.tokens import token
from timeline_fanout.graph.model.edges import EdgeChange, PostRecord
from timeline_fanout.graph.model.keys import ListKind, ListRef
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore
from timeline_fanout.graph.timelines.entries import TimelineEntry
from timeline_fanout.graph.timelines.reader import TimelineSource
from timeline_fanout.memcache import Cache, MemcacheCluster, Outcome
from timeline_fanout.memcache.trust import TrustSettings
from timeline_fanout_devstack.memcached_processes import end, own_server, start, stop

USERS = [f"u{i}" for i in range(24)]
BOUNDS = TrustSettings(timeout_s=0.3, retry_s=0.3)
LEASE_S = 0.3  # on the register every process of a test shares
Server = tuple[subprocess.Popen[bytes], tuple[str, int]]


@pytest.fixture
def three() -> Iterator[list[Server]]:
    with own_server() as a, own_server() as b, own_server() as c:
        yield [a, b, c]


@pytest.fixture
def register() -> HeldRing:
    """The register every process of a test reads its servers' epochs from."""
    return HeldRing(None)


def process(
    servers: list[Server], store: SqliteEdgeStore, namespace: str, register: HeldRing
) -> ShardedLists:
    """What one process of the product holds: a cluster with a trust of its own, on the
    shared register."""
    addresses = [address for _, address in servers]
    trust = process_trust([f"{h}:{p}" for h, p in addresses], register, BOUNDS, LEASE_S)
    cache = MemcacheCluster(addresses, trust=trust)
    return TokenLists(
        ShardedLayout, cache, store, ListSettings(namespace=namespace, compact_write_prob=0.2)
    )


class Graph:
    """Random follows and unfollows, written as the graph consumer writes them: the store
    first, then the lists' tokens."""

    def __init__(self, store: SqliteEdgeStore, seed: int) -> None:
        self.store = store
        self.rng = random.Random(seed)
        self.pos = 0

    def write(self, lists: ShardedLists, events: int) -> None:
        tokens: dict[ListRef, list[tuple[bool, str, int]]] = {}
        for c in self.changes(events):
            tokens.setdefault(ListRef(ListKind.FOLLOWERS, c.followee), []).append(
                (c.active, c.follower, c.pos)
            )
            tokens.setdefault(ListRef(ListKind.FOLLOWING, c.follower), []).append(
                (c.active, c.followee, c.pos)
            )
        lists.apply(tokens)

    def changes(self, events: int) -> list[EdgeChange]:
        """``events`` random follows and unfollows written to the store; those it applied."""
        changes = []
        for _ in range(events):
            self.pos += 1
            a, b = self.rng.sample(USERS, 2)
            changes.append(EdgeChange(a, b, self.rng.random() < 0.7, self.pos))
        return self.store.apply(changes)


def refs() -> list[ListRef]:
    return [ListRef(kind, u) for u in USERS for kind in (ListKind.FOLLOWERS, ListKind.FOLLOWING)]


def wrong(lists: ShardedLists, store: SqliteEdgeStore) -> list[ListRef]:
    read = lists.read_many(refs())
    return [ref for ref in refs() if read[ref] != frozenset(store.all_members(ref))]


def on(lists: ShardedLists, server: Server) -> list[ListRef]:
    name = f"{server[1][0]}:{server[1][1]}"
    return [r for r in refs() if lists.cache.server_for(lists.index_key(r)) == name]


def test_lists_stay_exact_while_a_server_is_killed_and_restarted_empty(
    three: list[Server], sqlite_store: SqliteEdgeStore, unique: str, register: HeldRing
) -> None:
    graph = Graph(sqlite_store, 1)
    writer = process(three, sqlite_store, unique, register)
    graph.write(writer, 300)
    assert wrong(writer, sqlite_store) == []  # every list cached
    victim = three[0]
    assert on(writer, victim), "the victim holds some lists"
    victim[0].kill()
    victim[0].wait()
    graph.write(writer, 200)  # deliveries go on: nothing raises
    assert wrong(writer, sqlite_store) == []
    assert writer.stats.degraded_reads > 0
    restarted = start(victim[1][1])
    try:
        graph.write(writer, 200)
        assert wrong(writer, sqlite_store) == []
        assert wrong(process(three, sqlite_store, unique, register), sqlite_store) == []
    finally:
        end(restarted)


def test_a_hung_server_resumed_with_stale_items_never_serves_them(
    three: list[Server], sqlite_store: SqliteEdgeStore, unique: str, register: HeldRing
) -> None:
    graph = Graph(sqlite_store, 2)
    writer = process(three, sqlite_store, unique, register)
    bystander = process(three, sqlite_store, unique, register)  # reads, never writes
    graph.write(writer, 300)
    assert wrong(writer, sqlite_store) == []
    assert wrong(bystander, sqlite_store) == []  # holds leases on every server
    victim = three[1]
    stop(victim[0])
    try:
        graph.write(writer, 300)  # the victim's lists miss these writes
        assert wrong(writer, sqlite_store) == []
    finally:
        victim[0].send_signal(signal.SIGCONT)
    # The victim answers again with every item it held. Neither the writer, nor the reader
    # that never saw it go away, nor a process started now, may read them.
    for reader in (writer, bystander, process(three, sqlite_store, unique, register)):
        assert wrong(reader, sqlite_store) == []
    graph.write(writer, 200)
    assert wrong(writer, sqlite_store) == []
    assert wrong(bystander, sqlite_store) == []


def test_a_server_killed_while_stopped_and_back_empty_serves_only_new_items(
    three: list[Server], sqlite_store: SqliteEdgeStore, unique: str, register: HeldRing
) -> None:
    """A server that missed writes while hung, then restarted empty, is used again only
    under a new epoch: nothing it held before is asked for."""
    graph = Graph(sqlite_store, 3)
    writer = process(three, sqlite_store, unique, register)
    graph.write(writer, 300)
    victim = three[2]
    stop(victim[0])
    graph.write(writer, 100)
    end(victim[0])
    restarted = start(victim[1][1])
    try:
        graph.write(writer, 100)
        for reader in (writer, process(three, sqlite_store, unique, register)):
            assert wrong(reader, sqlite_store) == []
    finally:
        end(restarted)


class HangsWhenAskedWhetherItExists:
    """A process's cache (the product's cluster) whose server ``victim`` hangs right after it
    answered an APPEND, when the writer asks whether the refused item exists: a read left
    unanswered that decides the write."""

    def __init__(self, cluster: MemcacheCluster, victim: subprocess.Popen[bytes]) -> None:
        self._cluster = cluster
        self._victim = victim

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cluster, name)

    def exists_many(self, keys: Iterable[bytes]) -> dict[bytes, bool]:
        stop(self._victim)
        return self._cluster.exists_many(keys)


def test_a_delivery_skipped_on_an_unanswered_existence_check_revokes_the_server(
    three: list[Server], sqlite_store: SqliteEdgeStore, unique: str, register: HeldRing
) -> None:
    """A timeline at memcached's item size limit refuses the APPEND; the writer then asks
    whether it exists, and the server hangs: the delivery must count as missed, so the full
    timeline, still there when the server resumes, is never served without the post."""
    now = int(time.time() * 1000)
    settings = ListSettings(namespace=unique, max_members=800)
    writer_cache = process(three, sqlite_store, unique, register).cache
    timelines = TokenLists(CappedLayout, writer_cache, TimelineSource(sqlite_store, 800), settings)
    victim = three[0]
    name = f"{victim[1][0]}:{victim[1][1]}"
    user = next(
        u
        for u in (f"r{i}" for i in range(10_000))
        if writer_cache.server_for(timelines.index_key(ListRef(ListKind.TIMELINE, u))) == name
    )
    sqlite_store.apply([EdgeChange(user, "author", True, 2)])
    ref = ListRef(ListKind.TIMELINE, user)
    timelines.read(ref)  # cached
    key = timelines.index_key(ref)
    old = [
        token(True, TimelineEntry(now - 10**7 + i, "author", f"old{i}").member)
        for i in range(60_000)
    ]
    low, high = 1, len(old)  # the most tokens memcached keeps in one item: the limit
    while low < high:
        middle = (low + high + 1) // 2
        stored = writer_cache.set_many({key: b"".join(old[:middle])})[key]
        low, high = (middle, high) if stored is Outcome.STORED else (low, middle - 1)
    assert writer_cache.set_many({key: b"".join(old[:low])})[key] is Outcome.STORED
    fresh = TimelineEntry(now, "author", "fresh")
    sqlite_store.store_posts([PostRecord("author", "fresh", now, "hello")])
    faulty = TokenLists(
        CappedLayout,
        cast(Cache, HangsWhenAskedWhetherItExists(writer_cache, victim[0])),
        TimelineSource(sqlite_store, 800),
        settings,
    )
    try:
        faulty.deliver([Delivery(token(True, fresh.member), [user])])
    finally:
        victim[0].send_signal(signal.SIGCONT)
    reader = TokenLists(
        CappedLayout,
        process(three, sqlite_store, unique, register).cache,
        TimelineSource(sqlite_store, 800),
        settings,
    )
    assert fresh.member in reader.read(ref)


def test_two_servers_keep_writing_and_reading_exact_while_one_is_down(
    sqlite_store: SqliteEdgeStore, unique: str, register: HeldRing
) -> None:
    """Nothing counts servers: with two, either can fail and the writes go on around it, its
    lists read from the store, and it is used again, empty, once back."""
    with own_server() as a, own_server() as b:
        two = [a, b]
        graph = Graph(sqlite_store, 4)
        writer = process(two, sqlite_store, unique, register)
        graph.write(writer, 200)
        assert wrong(writer, sqlite_store) == []
        victim = two[0]
        assert on(writer, victim), "the victim holds some lists"
        end(victim[0])
        graph.write(writer, 200)  # nothing raises
        assert wrong(writer, sqlite_store) == []
        restarted = start(victim[1][1])
        try:
            fresh = process(two, sqlite_store, unique, register)
            fresh.cache.settle()  # type: ignore[attr-defined]
            graph.write(writer, 100)
            assert wrong(fresh, sqlite_store) == []
            assert wrong(writer, sqlite_store) == []
            assert fresh.stats.degraded_reads == 0  # read from the cache again
        finally:
            end(restarted)
