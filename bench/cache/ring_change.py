"""Ring change: a fourth memcached server added to three and taken away again while lists are
read and written, by the ring-change protocol against a naive rolling restart, in the same run.

Each arm starts from the same point: four memcached processes of its own (three in the ring), a
SQLite edge store holding the same seeded graph, and every follower and following list read
once, so every list is cached. Four processes of the product then run, each in a thread of its
own with its own store connection, cluster and trust: two readers (API workers) reading lists
as fast as they can, each read checked against the store, and two writers (graph consumers)
applying 10 batches of 20 follows (20% unfollows) a second each, store first, then the lists, as
``GraphApplier.update_lists`` does; a batch whose lists' write fails transiently
(``CacheUnavailable``, as a moving list's write does) is kept and retried with the consumer
loop's backoff, the writer taking no new batch meanwhile. Readers pick lists by a Zipf law
(s = 1 over a shuffled user order, kind uniform); followees are drawn by the same law,
followers uniformly.

Timeline of an arm: steady on three servers (the baseline), the change to four, steady on four,
the change back to three (the reversal: the lists that moved to the fourth server come back to
servers that still hold their old copies), steady on three again. The two arms differ only in
how a change is made:

- **protocol**: ``change_ring`` writes the record moving, holds, writes it stable, holds
  again; each process reads the shared record on a clock of its own (as the tests do), and the
  benchmark moves each clock at staggered moments within each hold, so processes of two
  neighbouring states run side by side through most of each hold;
- **naive**: each process is restarted with a stable one-version record of the new servers
  (what a rolling restart with a new ``FANOUT_MEMCACHED`` does), at staggered moments over the
  same span as the protocol's two holds.

Per window of about a second (cut at phase boundaries; a phase's last window runs to its end
rather than leave a sliver): reads/s (completed by the two readers, the check against the store
included), store list reads/s (calls of the lists' source, ``snapshot``, by every process:
rebuilds, reads answered from the store, a writer's compaction reads), the readers' cache miss
ratio (their lists answered from the store: rebuilds, degraded and store reads of
``ListStats``, over their reads), reads that differed from the store, and the writers' refused
batches and attempts. A read is checked only when no batch touching its list
was between its store write and its lists' write at any moment from the read's start to the
check's end (such a read may lag the store without being wrong). At the end, once every kept
batch is applied, a newcomer process reads every list: those that differ from the store are
the wrong lists the change left behind.

Headline per arm: store list reads/s and miss ratio during the changes against the steady
state before them (the same run's baseline), their peak window, the writers' refusals and the
wrong lists at the end. With every list cached the steady state reads nothing from the store,
so a factor over it is unbounded (left empty); a last row gives the naive arm's figures over
the protocol's instead.
"""

from __future__ import annotations

import itertools
import random
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from bench.cache.failover import BOUNDS, CountedStore
from bench.support.report import Report
from timeline_fanout.cli.settings import Settings
from timeline_fanout.consumers.graph_apply import GraphApplier, Recorded
from timeline_fanout.graph import ListSettings, ShardedLists
from timeline_fanout.graph.failures import is_transient
from timeline_fanout.graph.lists.sharded import ShardedLayout
from timeline_fanout.graph.lists.token_lists import TokenLists
from timeline_fanout.graph.lists.tokens import MemberSet
from timeline_fanout.graph.model.edges import EdgeChange
from timeline_fanout.graph.model.keys import KeySpace, ListKind, ListRef
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore
from timeline_fanout.memcache import MemcacheCluster
from timeline_fanout.memcache.ring import Placement, RingRecord, RingView
from timeline_fanout.memcache.ring_change import change_ring
from timeline_fanout.memcache.trust import ServerTrust
from timeline_fanout_devstack.memcached_processes import own_server

RING_LEASE_S = 3600.0  # a protocol process reads the record again only when its clock is moved
ZIPF_S = 1.0
WRITE_BATCH = 20  # events per batch
BATCHES_PER_S = 10.0  # per writer
FOLLOW_SHARE = 0.8  # the rest are unfollows
BACKOFF_S = (0.1, 5.0)  # the consumer loop's first and longest wait between retries
WINDOW_S = 1.0
DRAIN_RETRIES = 50  # a stopping writer's retries of a kept batch, 0.1 s apart
NAMESPACE = "brc"
# The processes, in the order they switch (the protocol's second step runs it backwards).
ORDER = ("writer 1", "reader 1", "writer 2", "reader 2")
KINDS = (ListKind.FOLLOWERS, ListKind.FOLLOWING)


@dataclass(frozen=True, slots=True)
class Shape:
    users: int
    edges: int
    steady_s: float  # each steady phase
    hold_s: float  # each of the protocol's two holds; a naive change spans two


QUICK = Shape(users=200, edges=2_000, steady_s=1.5, hold_s=1.0)
FULL = Shape(users=2_000, edges=20_000, steady_s=6.0, hold_s=5.0)


def names(servers: Sequence[tuple[str, int]]) -> tuple[str, ...]:
    return tuple(sorted(f"{host}:{port}" for host, port in servers))


def pairs(nodes: Sequence[str]) -> list[tuple[str, int]]:
    return [(host, int(port)) for host, port in (node.rsplit(":", 1) for node in nodes)]


class Zipf:
    """Items drawn with weight ``1 / rank**s``, ranks given by a seeded shuffle (so the hot
    users are not the first ids)."""

    def __init__(self, items: Sequence[str], s: float, seed: int) -> None:
        self.items = list(items)
        random.Random(seed).shuffle(self.items)
        self.cum = list(itertools.accumulate(1.0 / (rank + 1) ** s for rank in range(len(items))))

    def pick(self, rng: random.Random) -> str:
        return rng.choices(self.items, cum_weights=self.cum)[0]


class SharedRecord:
    """The ring record every protocol process reads (the edge store, in production)."""

    def __init__(self, record: RingRecord) -> None:
        self.record: RingRecord | None = record
        self._lock = threading.Lock()

    def read_ring(self) -> RingRecord | None:
        return self.record

    def swap_ring(self, expected: RingRecord | None, record: RingRecord) -> bool:
        with self._lock:
            if self.record != expected:
                return False
            self.record = record
            return True


class Marks:
    """Which lists a batch is writing: from before its store write until its lists' write
    succeeded (a kept batch stays marked). A read is checkable only if its list was unmarked,
    and marked by nobody in between, from the read's start to its check's end."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy: Counter[ListRef] = Counter()
        self._changed: Counter[ListRef] = Counter()

    def begin(self, refs: set[ListRef]) -> None:
        with self._lock:
            self._busy.update(refs)
            self._changed.update(refs)

    def end(self, refs: set[ListRef]) -> None:
        with self._lock:
            self._busy.subtract(refs)
            self._changed.update(refs)

    def of(self, ref: ListRef) -> tuple[int, int]:
        with self._lock:
            return self._busy[ref], self._changed[ref]


@dataclass(slots=True)
class Counts:
    """One process's running totals, written by its thread only, summed by the main thread."""

    reads: int = 0
    checked: int = 0
    wrong: int = 0
    read_errors: int = 0
    events: int = 0
    batches: int = 0
    batches_refused: int = 0
    refused_attempts: int = 0
    longest_held_s: float = 0.0
    unapplied: int = 0  # batches still refused when the writer stopped


class Process:
    """One process of the product: its own store connection (its source counted), trust,
    cluster and lists. A protocol process reads ``source`` on a clock of its own (``switch``
    moves it past the lease, so the record is read again at the next use); a naive one has a
    fixed ring, replaced by a restart (``restart``, applied by its own thread at ``poll``)."""

    def __init__(
        self, name: str, servers: Sequence[str], path: Path, source: SharedRecord | None
    ) -> None:
        self.name = name
        self.source = source
        self.now = 0.0
        self.store = SqliteEdgeStore(path)
        self.counted = CountedStore(self.store)
        self.counts = Counts()
        self._carried = 0  # misses of the lists before the last restart
        self._restart_to: tuple[str, ...] | None = None
        self._lock = threading.Lock()  # a restart against the main thread's sums
        self.cluster, self.lists, self.applier = self._open(servers)

    def _open(self, servers: Sequence[str]) -> tuple[MemcacheCluster, ShardedLists, GraphApplier]:
        record = RingRecord.of(servers)
        view = (
            RingView(record, families=KeySpace.families)
            if self.source is None
            else RingView(
                record,
                self.source,
                RING_LEASE_S,
                clock=lambda: self.now,
                families=KeySpace.families,
            )
        )
        trust = ServerTrust(list(record.servers), BOUNDS, ring=view)
        cache = MemcacheCluster(pairs(record.servers), trust=trust)
        lists = TokenLists(ShardedLayout, cache, self.counted, ListSettings(namespace=NAMESPACE))
        return cache, lists, GraphApplier(self.store, lists)

    @property
    def misses(self) -> int:
        """Lists this process read that the cache did not answer."""
        with self._lock:
            s = self.lists.stats
            return self._carried + s.rebuilds + s.degraded_reads + s.store_reads

    def switch(self) -> None:
        self.now += RING_LEASE_S

    def restart(self, servers: Sequence[str]) -> None:
        self._restart_to = tuple(servers)

    def poll(self) -> None:
        """A restart asked for, made by the thread that uses the process."""
        if (servers := self._restart_to) is not None:
            self._restart_to = None
            self.cluster.close()
            opened = self._open(servers)
            carried = self.misses
            with self._lock:
                self._carried = carried
                self.cluster, self.lists, self.applier = opened

    def close(self) -> None:
        self.cluster.close()
        self.store.close()


class Arm:
    """One arm's run: its processes, their threads, and the per-window figures."""

    def __init__(
        self,
        name: str,
        shape: Shape,
        servers: Sequence[tuple[str, int]],
        path: Path,
        report: Report,
    ) -> None:
        self.name = name
        self.shape = shape
        self.three = names(servers[:3])
        self.four = names(servers)
        self.path = path
        self.report = report
        self.users = [f"u{i}" for i in range(shape.users)]
        self.zipf = Zipf(self.users, ZIPF_S, seed=11)
        self.source = SharedRecord(RingRecord.of(self.three)) if name == "protocol" else None
        self.processes: dict[str, Process] = {}  # each opened by its own thread
        self.ready = threading.Barrier(len(ORDER) + 1)
        self.marks = Marks()
        self.pos = itertools.count(shape.edges + 1)
        self.stop = threading.Event()
        self.failures: list[BaseException] = []
        self.started = 0.0
        self.phase = ""
        self._window: tuple[float, dict[str, float]] = (0.0, {})

    # -- the load -----------------------------------------------------------------------------

    def _reader(self, process: Process, seed: int) -> None:
        """Lists read as fast as they come, each checked against the store (``Marks``)."""
        rng = random.Random(seed)
        counts = process.counts
        while not self.stop.is_set():
            process.poll()
            ref = ListRef(rng.choice(KINDS), self.zipf.pick(rng))
            before = self.marks.of(ref)
            try:
                members = process.lists.read(ref)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                counts.read_errors += 1
                continue
            truth = frozenset(process.store.all_members(ref))
            counts.reads += 1
            if before[0] == 0 and self.marks.of(ref) == before:
                counts.checked += 1
                counts.wrong += members != truth

    def _writer(self, process: Process, seed: int) -> None:
        """Paced batches. A refused batch is kept and retried with the consumer loop's
        backoff (consumers/loop.py), and no new batch is taken meanwhile, as a consumer
        retrying a batch keeps its partitions paused; a stopping writer drains its kept batch."""
        rng = random.Random(seed)
        counts = process.counts
        kept: tuple[Recorded, set[ListRef], float] | None = None
        backoff, retry_at = BACKOFF_S[0], 0.0
        next_batch = time.monotonic()
        drains = 0  # a stopping writer's retries of its kept batch: bounded, the rest reported
        while not (stopping := self.stop.is_set()) or (kept is not None and drains < DRAIN_RETRIES):
            process.poll()
            now = time.monotonic()
            if kept is None:
                if now >= next_batch:
                    next_batch = max(next_batch + 1 / BATCHES_PER_S, now)
                    recorded, refs = self._batch(process, rng)
                    counts.batches += 1
                    counts.events += recorded.changes
                    kept = (recorded, refs, now)
                    if self._applied(process, recorded):
                        self.marks.end(refs)
                        kept = None
                    else:
                        counts.batches_refused += 1
                        backoff, retry_at = BACKOFF_S[0], now + BACKOFF_S[0]
            elif now >= retry_at or stopping:
                recorded, refs, since = kept
                if self._applied(process, recorded):
                    self.marks.end(refs)
                    counts.longest_held_s = max(counts.longest_held_s, time.monotonic() - since)
                    kept = None
                else:
                    drains += stopping
                    backoff = min(backoff * 2, BACKOFF_S[1])
                    retry_at = now + backoff
            wake = retry_at if kept is not None else next_batch
            time.sleep(BACKOFF_S[0] if stopping else min(max(wake - time.monotonic(), 0.0), 0.01))
        counts.unapplied += kept is not None

    def _batch(self, process: Process, rng: random.Random) -> tuple[Recorded, set[ListRef]]:
        """A batch of follows and unfollows, marked, then written to the store."""
        changes = []
        for _ in range(WRITE_BATCH):
            follower, followee = rng.choice(self.users), self.zipf.pick(rng)
            if follower != followee:
                active = rng.random() < FOLLOW_SHARE
                changes.append(EdgeChange(follower, followee, active, next(self.pos)))
        refs = {ListRef(ListKind.FOLLOWERS, c.followee) for c in changes}
        refs |= {ListRef(ListKind.FOLLOWING, c.follower) for c in changes}
        self.marks.begin(refs)
        live = process.store.apply(changes)
        users = {u for c in changes for u in (c.follower, c.followee)}
        return Recorded(len(changes), live, 0, users), refs

    def _applied(self, process: Process, recorded: Recorded) -> bool:
        """The batch's lists written; False when the write failed as the consumer retries."""
        try:
            process.applier.update_lists(recorded)
        except Exception as exc:
            if not is_transient(exc):
                raise
            process.counts.refused_attempts += 1
            return False
        return True

    def _process(self, name: str, seed: int) -> None:
        """One process's thread: it opens the process (SQLite connections stay in the thread
        that made them), takes its leases, caches every list if it is the first reader, waits
        for the others, then runs its load until the arm stops."""
        try:
            process = Process(name, self.three, self.path, self.source)
        except BaseException as exc:
            self.failures.append(exc)
            self.ready.abort()
            return
        try:
            self.processes[name] = process
            process.cluster.settle()
            if name == "reader 1":
                process.lists.read_many(self.refs())
            self.ready.wait()
            (self._writer if name.startswith("writer") else self._reader)(process, seed)
        except BaseException as exc:
            self.failures.append(exc)
            self.ready.abort()
            self.stop.set()
        finally:
            process.close()

    # -- the timeline -------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """The whole arm; its headline figures."""
        self._setup()
        threads = [
            threading.Thread(
                target=self._process, args=(name, i), name=f"{self.name} {name}", daemon=True
            )
            for i, name in enumerate(ORDER)
        ]
        for thread in threads:
            thread.start()
        try:
            self.ready.wait(timeout=120)
            self.started = time.monotonic()
            self._next_window("before")
            self._wait(self.shape.steady_s)
            self._next_window("adding")
            self._change(self.four)
            self._next_window("on four")
            self._wait(self.shape.steady_s)
            self._next_window("removing")
            self._change(self.three)
            self._next_window("after")
            self._wait(self.shape.steady_s)
            self._close_window()
        except threading.BrokenBarrierError:
            pass  # a process failed to start: raised below
        finally:
            self.stop.set()
            self.ready.abort()
            for thread in threads:
                thread.join(timeout=60)
        if self.failures:
            raise self.failures[0]
        return self._headline(self._wrong_at_end())

    def _setup(self) -> None:
        """The graph into the store, and epochs on the three servers (made once here, so the
        processes starting together find them)."""
        graph = SqliteEdgeStore(self.path)
        rng = random.Random(5)
        edges: set[tuple[str, str]] = set()
        while len(edges) < self.shape.edges:
            follower, followee = rng.choice(self.users), self.zipf.pick(rng)
            if follower != followee:
                edges.add((follower, followee))
        changes = [EdgeChange(a, b, True, pos) for pos, (a, b) in enumerate(sorted(edges), 1)]
        for at in range(0, len(changes), 1000):
            graph.apply(changes[at : at + 1000])
        graph.close()
        first = MemcacheCluster(pairs(self.three), trust=ServerTrust(list(self.three), BOUNDS))
        first.settle()
        first.close()

    def refs(self) -> list[ListRef]:
        return [ListRef(kind, user) for user in self.users for kind in KINDS]

    def _change(self, servers: tuple[str, ...]) -> None:
        """The ring from its servers to ``servers``, the processes switching at staggered
        moments (module docstring)."""
        order = [self.processes[name] for name in ORDER]
        if self.source is None:
            span = 2 * self.shape.hold_s
            self._wait(
                span, [(span * (i + 0.5) / len(order), p, servers) for i, p in enumerate(order)]
            )
            return
        steps = iter((order, order[::-1]))

        def hold(seconds: float) -> None:
            step = next(steps)
            self._wait(
                seconds, [(seconds * (i + 0.5) / len(step), p, None) for i, p in enumerate(step)]
            )

        current = self.source.read_ring()
        assert current is not None
        change_ring(
            self.source,
            current.servers,
            servers,
            self.shape.hold_s,
            sleep=hold,
        )

    def _wait(
        self,
        seconds: float,
        switches: Sequence[tuple[float, Process, tuple[str, ...] | None]] = (),
    ) -> None:
        """``seconds`` of load, switching each process at its moment (a new record read, or a
        restart with the servers given), windows closed as they fill."""
        began = time.monotonic()
        todo = sorted(switches, key=lambda s: s[0])
        while (now := time.monotonic()) < began + seconds or todo:
            while todo and now - began >= todo[0][0]:
                _, process, servers = todo.pop(0)
                if servers is None:
                    process.switch()
                else:
                    process.restart(servers)
            # A full window is closed unless the wait ends within half a window: the last
            # window of a phase runs to its end rather than leave a sliver.
            if now - self._window[0] >= WINDOW_S and began + seconds - now >= WINDOW_S / 2:
                self._next_window(self.phase)
            if self.failures:
                raise self.failures[0]
            time.sleep(0.005)

    # -- figures ------------------------------------------------------------------------------

    def _totals(self) -> dict[str, float]:
        totals: dict[str, float] = {f.name: 0 for f in fields(Counts)}
        for process in self.processes.values():
            for f in fields(Counts):
                totals[f.name] += getattr(process.counts, f.name)
        totals["longest_held_s"] = max(p.counts.longest_held_s for p in self.processes.values())
        readers = [p for n, p in self.processes.items() if n.startswith("reader")]
        totals["misses"] = sum(p.misses for p in readers)
        totals["store_reads"] = sum(p.counted.queries for p in self.processes.values())
        return totals

    def _next_window(self, phase: str) -> None:
        """The window open closed, and one of ``phase`` opened."""
        self._close_window()
        self.phase = phase
        self._window = (time.monotonic(), self._totals())

    def _close_window(self) -> None:
        began, before = self._window
        if not before:
            return
        now = time.monotonic()
        seconds = now - began
        after = self._totals()
        d = {k: after[k] - before[k] for k in after}
        self.report.add(
            kind="window",
            arm=self.name,
            phase=self.phase,
            t_s=round(began - self.started, 2),
            seconds=round(seconds, 3),
            reads=int(d["reads"]),
            reads_per_s=round(d["reads"] / seconds, 1),
            store_reads=int(d["store_reads"]),
            store_reads_per_s=round(d["store_reads"] / seconds, 1),
            misses=int(d["misses"]),
            miss_ratio=round(d["misses"] / d["reads"], 4) if d["reads"] else None,
            checked_reads=int(d["checked"]),
            wrong_reads=int(d["wrong"]),
            read_errors=int(d["read_errors"]),
            write_events_per_s=round(d["events"] / seconds, 1),
            batches_refused=int(d["batches_refused"]),
            refused_attempts=int(d["refused_attempts"]),
        )
        self._window = (now, {})

    def _wrong_at_end(self) -> int:
        """Every list read by a process started now (on the final ring) and compared with the
        store; every kept batch was applied before (the writers drain them as they stop)."""
        newcomer = Process("newcomer", self.three, self.path, self.source)
        refs = self.refs()
        read: dict[ListRef, MemberSet] = {}
        for at in range(0, len(refs), 500):
            read.update(newcomer.lists.read_many(refs[at : at + 500]))
        wrong = sum(read[ref] != frozenset(newcomer.store.all_members(ref)) for ref in refs)
        newcomer.close()
        return wrong

    def lists_moved(self) -> int:
        """The lists whose server differs between three servers and four (the share a change
        makes cold, or, naively, splits between two copies)."""
        keys = KeySpace(NAMESPACE).ref_keys(self.refs())
        three = Placement(RingRecord.of(self.three), KeySpace.families)
        four = Placement(RingRecord.of(self.four), KeySpace.families)
        before = [three.nodes[o] for o in three.owners(keys)]
        after = [four.nodes[o] for o in four.owners(keys)]
        return sum(a != b for a, b in zip(before, after, strict=True))

    def _headline(self, wrong_at_end: int) -> dict[str, Any]:
        rows = [r for r in self.report.rows if r["kind"] == "window" and r["arm"] == self.name]
        steady = _rates([r for r in rows if r["phase"] == "before"])
        changing = [r for r in rows if r["phase"] in ("adding", "removing")]
        during = _rates(changing)
        totals = self._totals()
        factor = (
            round(during["store_reads_per_s"] / steady["store_reads_per_s"], 2)
            if steady["store_reads_per_s"] > 0
            else None
        )
        return {
            "kind": "headline",
            "arm": self.name,
            "lists": len(self.refs()),
            "lists_moved": self.lists_moved(),
            "steady_reads_per_s": steady["reads_per_s"],
            "change_reads_per_s": during["reads_per_s"],
            "steady_store_reads_per_s": steady["store_reads_per_s"],
            "change_store_reads_per_s": during["store_reads_per_s"],
            "extra_store_reads_per_s": round(
                during["store_reads_per_s"] - steady["store_reads_per_s"], 1
            ),
            "store_reads_factor": factor,
            "peak_store_reads_per_s": max(r["store_reads_per_s"] for r in changing),
            "steady_miss_ratio": steady["miss_ratio"],
            "change_miss_ratio": during["miss_ratio"],
            "extra_miss_ratio": round(during["miss_ratio"] - steady["miss_ratio"], 4),
            "peak_miss_ratio": max(r["miss_ratio"] or 0.0 for r in changing),
            "checked_reads": int(totals["checked"]),
            "wrong_reads": int(totals["wrong"]),
            "read_errors": int(totals["read_errors"]),
            "batches": int(totals["batches"]),
            "batches_refused": int(totals["batches_refused"]),
            "refused_attempts": int(totals["refused_attempts"]),
            "longest_held_s": round(totals["longest_held_s"], 2),
            "unapplied_batches": int(totals["unapplied"]),
            "wrong_lists_at_end": wrong_at_end,
        }


def _rates(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Rates over the windows together (sums over their seconds, not a mean of rates)."""
    seconds = sum(r["seconds"] for r in rows) or 1.0
    reads = sum(r["reads"] for r in rows)
    return {
        "reads_per_s": round(reads / seconds, 1),
        "store_reads_per_s": round(sum(r["store_reads"] for r in rows) / seconds, 1),
        "miss_ratio": round(sum(r["misses"] for r in rows) / reads, 4) if reads else 0.0,
    }


def run(settings: Settings, report: Report) -> None:
    shape = QUICK if report.quick else FULL
    for name in ("protocol", "naive"):
        with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
            servers = [
                address for _, address in (stack.enter_context(own_server()) for _ in range(4))
            ]
            report.add(**Arm(name, shape, servers, Path(tmp) / "edges.db", report).run())
    report.add(**_comparison([r for r in report.rows if r["kind"] == "headline"]))
    windows = [r for r in report.rows if r["kind"] == "window"]
    bars = []
    for arm in ("protocol", "naive"):
        for phase in ("before", "adding", "on four", "removing", "after"):
            mine = [r for r in windows if r["arm"] == arm and r["phase"] == phase]
            bars.append((f"{arm}: {phase}", _rates(mine)["store_reads_per_s"]))
    report.write(bars, "store list reads/s")
    _plot_windows(windows, report.out / f"{report.name}-windows.png")


def _comparison(headlines: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The naive arm's figures over the protocol's: the steady state reads nothing from the
    store, so each arm's factor over its own baseline is unbounded, and the arms are compared
    with each other instead."""
    by = {h["arm"]: h for h in headlines}
    protocol, naive = by["protocol"], by["naive"]

    def over(key: str) -> float | None:
        return round(naive[key] / protocol[key], 2) if protocol[key] else None

    return {
        "kind": "comparison",
        "extra_store_reads_naive_over_protocol": over("extra_store_reads_per_s"),
        "peak_store_reads_naive_over_protocol": over("peak_store_reads_per_s"),
        "extra_miss_ratio_naive_over_protocol": over("extra_miss_ratio"),
        "wrong_reads_protocol": protocol["wrong_reads"],
        "wrong_reads_naive": naive["wrong_reads"],
        "wrong_lists_at_end_protocol": protocol["wrong_lists_at_end"],
        "wrong_lists_at_end_naive": naive["wrong_lists_at_end"],
    }


def _plot_windows(windows: Sequence[dict[str, Any]], path: Path) -> None:
    """Store list reads/s, miss ratio and wrong reads per window, both arms over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("store_reads_per_s", "store list reads/s"),
        ("miss_ratio", "readers' miss ratio"),
        ("wrong_reads_per_s", "wrong reads/s"),
    )
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 7), sharex=True)
    for ax, (key, label) in zip(axes, panels, strict=True):
        for arm, color in (("protocol", "#4c72b0"), ("naive", "#c44e52")):
            mine = [r for r in windows if r["arm"] == arm]
            values = [
                r["wrong_reads"] / r["seconds"] if key == "wrong_reads_per_s" else r[key] or 0
                for r in mine
            ]
            ax.step(  # each window's value held to its end
                [r["t_s"] for r in mine] + [mine[-1]["t_s"] + mine[-1]["seconds"]],
                [*values, values[-1]],
                where="post",
                label=arm,
                color=color,
            )
            for phase in ("adding", "removing"):
                spans = [r for r in mine if r["phase"] == phase]
                if spans and arm == "protocol":
                    end = spans[-1]["t_s"] + spans[-1]["seconds"]
                    ax.axvspan(spans[0]["t_s"], end, color="#dddddd", zorder=0)
        ax.set_ylabel(label)
    axes[0].legend()
    axes[0].set_title("ring change 3 → 4 → 3 servers (grey: the protocol's changes)")
    axes[-1].set_xlabel("seconds since the arm's start")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
