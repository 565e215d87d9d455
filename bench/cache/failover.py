"""Failover: list reads and writes while one memcached server of three is killed, restarted
empty, hung (SIGSTOP) and resumed, against all three up in the same run.

Three memcached processes of the benchmark's own and a SQLite edge store; one process reads
random follower and following lists (each read checked against the store), writes follows
and unfollows between reads, as the graph consumer does (store first, then tokens), and
delivers a post to every user's timeline after each write, as the fan-out consumer does. Per
phase: reads/s, read p50/p99, edge-store queries/s (rebuilds and reads answered from the
store), write events/s, the time a post takes to reach every timeline on a server that is up
(the delivery lag of the healthy servers' timelines) and the share of reads that were exact.
The first phase, all servers up, is the baseline. The bounds are this benchmark's (0.3 s
timeout, retry and lease), so phases are short.
"""

from __future__ import annotations

import random
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

from bench.support.report import Report, percentiles
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph import ListSettings, ShardedLists
from timeline_fanout.graph.lists.capped import CappedLayout, CappedLists
from timeline_fanout.graph.lists.sharded import ShardedLayout
from timeline_fanout.graph.lists.token_lists import Delivery, TokenLists
from timeline_fanout.graph.lists.tokens import Change, token
from timeline_fanout.graph.model.edges import EdgeChange, Snapshot
from timeline_fanout.graph.model.keys import KeySpace, ListKind, ListRef
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore
from timeline_fanout.graph.timelines.entries import TimelineEntry
from timeline_fanout.graph.timelines.reader import TimelineSource
from timeline_fanout.memcache import MemcacheCluster
from timeline_fanout.memcache.ring import RingRecord, RingView
from timeline_fanout.memcache.trust import ServerTrust, TrustSettings
from timeline_fanout_devstack.memcached_processes import end, own_server, start, stop

BOUNDS = TrustSettings(timeout_s=0.3, retry_s=0.3)
LEASE_S = 0.3  # a revocation holds its writer this long
CAP = 800  # entries a timeline keeps


class CountedStore:
    """The lists' source, counting the store queries a read costs."""

    def __init__(self, store: SqliteEdgeStore) -> None:
        self.store = store
        self.queries = 0

    def snapshot(self, ref: ListRef) -> Snapshot:
        self.queries += 1
        return self.store.snapshot(ref)


class Load:
    """Reads of random lists, each compared with the store, with a batch of writes between
    every ``READS_PER_WRITE`` reads."""

    READS_PER_WRITE = 10
    WRITE_BATCH = 20

    def __init__(
        self, users: int, store: SqliteEdgeStore, lists: ShardedLists, timelines: CappedLists
    ) -> None:
        self.users = [f"u{i}" for i in range(users)]
        self.store = store
        self.lists = lists
        self.timelines = timelines
        self.rng = random.Random(7)
        self.pos = 0
        self.posts = 0

    def deliver(self) -> float:
        """One post delivered to every user's timeline; the seconds it took."""
        self.posts += 1
        entry = TimelineEntry(self.posts, "author", f"p{self.posts}")
        started = time.perf_counter()
        self.timelines.deliver([Delivery(token(True, entry.member), self.users)])
        return time.perf_counter() - started

    def write(self, events: int) -> None:
        changes = []
        for _ in range(events):
            self.pos += 1
            a, b = self.rng.sample(self.users, 2)
            changes.append(EdgeChange(a, b, self.rng.random() < 0.8, self.pos))
        tokens: dict[ListRef, list[Change]] = {}
        for c in self.store.apply(changes):
            followers = ListRef(ListKind.FOLLOWERS, c.followee)
            tokens.setdefault(followers, []).append(Change(c.active, c.follower, c.pos))
            following = ListRef(ListKind.FOLLOWING, c.follower)
            tokens.setdefault(following, []).append(Change(c.active, c.followee, c.pos))
        self.lists.apply(tokens)

    def phase(self, seconds: float) -> dict[str, float]:
        source = self.lists.source
        assert isinstance(source, CountedStore)
        queries, reads, exact, written = source.queries, [], 0, 0
        started = time.perf_counter()
        write_s = 0.0
        delivered: list[float] = []
        while time.perf_counter() - started < seconds:
            for _ in range(self.READS_PER_WRITE):
                kind = self.rng.choice((ListKind.FOLLOWERS, ListKind.FOLLOWING))
                ref = ListRef(kind, self.rng.choice(self.users))
                t = time.perf_counter()
                members = self.lists.read(ref)
                reads.append(time.perf_counter() - t)
                exact += members == frozenset(self.store.all_members(ref))
            t = time.perf_counter()
            self.write(self.WRITE_BATCH)
            write_s += time.perf_counter() - t
            written += self.WRITE_BATCH
            delivered.append(self.deliver())
        elapsed = time.perf_counter() - started
        read_s = sum(reads)
        stats = percentiles(reads)
        delivery = percentiles(delivered)
        return {
            "reads_per_s": round(len(reads) / read_s, 1),
            "read_p50_ms": stats["p50_ms"],
            "read_p99_ms": stats["p99_ms"],
            "store_queries_per_s": round((source.queries - queries) / elapsed, 1),
            "write_events_per_s": round(written / write_s, 1),
            "delivery_p50_ms": delivery["p50_ms"],
            "delivery_p99_ms": delivery["p99_ms"],
            "exact_share": round(exact / len(reads), 4),
        }


def run(settings: Settings, report: Report) -> None:
    users, seconds = (300, 1.5) if report.quick else (2_000, 6.0)
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        servers = [stack.enter_context(own_server()) for _ in range(3)]
        store = SqliteEdgeStore(Path(tmp) / "edges.db")
        addresses = [address for _, address in servers]
        names = [f"{h}:{p}" for h, p in addresses]
        view = RingView(RingRecord.of(names), lease_s=LEASE_S, families=KeySpace.families)
        trust = ServerTrust(names, BOUNDS, ring=view)
        counted = CountedStore(store)
        cache = MemcacheCluster(addresses, trust=trust)
        lists = TokenLists(ShardedLayout, cache, counted, ListSettings(namespace="bfo"))
        capped = ListSettings(namespace="bfo", max_members=CAP)
        timelines = TokenLists(CappedLayout, cache, TimelineSource(store, CAP), capped)
        load = Load(users, store, lists, timelines)
        load.write(10 * users)
        kinds = (ListKind.FOLLOWERS, ListKind.FOLLOWING)
        lists.read_many([ListRef(k, u) for u in load.users for k in kinds])
        timelines.read_many([ListRef(ListKind.TIMELINE, u) for u in load.users])
        proc, (_, port) = servers[0]
        for name, change in _phases(proc, port):
            change()
            report.add(phase=name, **load.phase(seconds))
        store.close()
    rows = report.rows
    base = rows[0]["reads_per_s"]
    report.write([(r["phase"], r["reads_per_s"] / base) for r in rows], "reads/s over all up")


def _phases(proc: subprocess.Popen[bytes], port: int) -> Iterator[tuple[str, Callable[[], None]]]:
    """The phases in order, each with what changes before it (the victim is the first
    server; a restarted one takes its port)."""
    victim = [proc]

    def kill() -> None:
        victim[0].kill()
        victim[0].wait()

    def restart() -> None:
        victim[0] = start(port)

    def hang() -> None:
        stop(victim[0])

    def resume() -> None:
        victim[0].send_signal(signal.SIGCONT)

    yield "all up", lambda: None
    yield "one killed", kill
    yield "restarted empty", restart
    yield "one hung (SIGSTOP)", hang
    yield "resumed with its items", resume
    yield "all up again", lambda: None
    end(victim[0])
