"""The capacity run: sizes measured on the real formats, then (behind a flag) a Zipf graph of
up to 1M users under a mixed load, against what the capacity model predicts for this machine.

Always (a few seconds): bytes per timeline entry and per list member, from memcached's own
``bytes`` counter around real deliveries and real follows, and bytes per edge and per post in
the SQLite edge store, from its page count, all with 19-digit ids as in production. These are
the ``sizes`` row that ``bench/capacity/capacity_model.py`` reads. Then (not with ``--quick``) the
graph topic of a sandbox is raised from 2 to 6 partitions while two producers publish
(``partition_change``): the ``partitions`` row.

With ``FANOUT_BENCH_CAPACITY=1`` (never with ``--quick``, never in CI): a graph of
``FANOUT_CAPACITY_USERS`` users (default 1,000,000) and ``FANOUT_CAPACITY_EDGES`` follows
(default 10,000,000), followees Zipf-distributed (exponent 1.1), written to the edge store; the
follower and following lists and the timelines of the 30% active users cached; then, for
``FANOUT_CAPACITY_SECONDS`` (default 180), posts, follows and HTTP timeline reads at stated
rates (``FANOUT_CAPACITY_POSTS_PER_S``, ``..._FOLLOWS_PER_S``, ``..._READS_PER_S``: 200,
100 and 300 by default), with a graph consumer, a fan-out consumer and ``fanout serve
--workers 1`` each in its own process, as deployed. A probe post every 2 s is timed from
publish until its follower's timeline shows it. Then a burst of posts and one of follows
(``..._BURST_POSTS``, ``..._BURST_FOLLOWS``), each timed until its consumer has applied it:
what one process takes at saturation. Then the same two bursts on a graph of
``SMALL_USERS`` users in a sandbox of its own (``graph: small``): the same-run baseline that
tells what the graph's size costs a consumer from what the bursts' mix costs it anywhere.
``python -m bench capacity-model`` compares it all with the model.
"""

from __future__ import annotations

import bisect
import http.client
import itertools
import os
import random
import re
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from bench.capacity import capacity_model as model
from bench.support.process_cpu import process_cpu_s
from bench.support.report import Report, Row
from bench.support.server import api_process
from timeline_fanout.cli import wiring
from timeline_fanout.cli.sandbox import sandbox
from timeline_fanout.cli.settings import Settings, environment
from timeline_fanout.consumers import Origin, Positioned
from timeline_fanout.consumers.graph_apply import GraphApplier
from timeline_fanout.graph import ListKind, ListRef
from timeline_fanout.graph.lists.token_lists import Delivery
from timeline_fanout.graph.lists.tokens import token
from timeline_fanout.graph.model.edges import EdgeChange, PostRecord
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore
from timeline_fanout.graph.timelines.entries import TimelineEntry
from timeline_fanout.schemas import Follow
from timeline_fanout_devstack.ports import free_port

FLAG = "FANOUT_BENCH_CAPACITY"
BASE_ID = 10**18  # ids are 19-digit numbers, as production's 64-bit ids are
TEXT = "x" * model.TEXT_BYTES
NOW_MS = 1_800_000_000_000


def uid(i: int) -> str:
    return str(BASE_ID + i)


def _env(name: str, default: float) -> float:
    return float(os.environ.get(f"FANOUT_CAPACITY_{name}", default))


def run(settings: Settings, report: Report) -> None:
    with sandbox(settings, "bcap") as s:
        sizes = measure_sizes(s, report.quick)
    report.add(row="sizes", **sizes)
    if not report.quick:
        with sandbox(settings, "bpart", partitions=PARTITIONS_BEFORE) as s:
            report.add(**partition_change(s))
    bars = [(k.removesuffix("_bytes"), v) for k, v in sizes.items() if k.endswith("_bytes")]
    if os.environ.get(FLAG) == "1" and not report.quick:
        users = int(_env("USERS", 1_000_000))
        overrides = {"partitions": 2}
        with sandbox(settings, "bcap", **overrides) as s:
            for row in mixed_load(s, users, int(_env("EDGES", 10 * users))):
                report.add(**row)
        with sandbox(settings, "bcsm", **overrides) as s:
            for row in small_graph_bursts(s):
                report.add(**row)
        measured = model.load_measured(capacity_rows=report.rows)
        for compared in model.compare_run(report.rows, measured):
            report.add(row="compare", **compared)
    else:
        report.add(row="load", skipped=f"{FLAG}=1 is not set (or --quick)")
    report.write(bars, "bytes")


# -- sizes ------------------------------------------------------------------------------------


def memcached_bytes(servers: Sequence[tuple[str, int]]) -> int:
    """The sum of every server's ``bytes`` statistic: what its items take, headers included."""
    total = 0
    for host, port in servers:
        with socket.create_connection((host, port), timeout=5) as sock:
            sock.sendall(b"stats\r\n")
            data = b""
            while not data.endswith(b"END\r\n"):
                data += sock.recv(65536)
        found = re.search(rb"STAT bytes (\d+)", data)
        assert found is not None, data[:200]
        total += int(found.group(1))
    return total


def _file_bytes(path: Path) -> int:
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        size = db.execute("PRAGMA page_size").fetchone()[0]
        free = db.execute("PRAGMA freelist_count").fetchone()[0]
    return int((pages - free) * size)


def measure_sizes(s: Settings, quick: bool) -> dict[str, float]:
    rng = random.Random(3)
    edges = 5_000 if quick else 300_000
    users = max(edges // int(model.MEAN_FOLLOWING), 2)
    posts = 2_000 if quick else 50_000
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sizes.db"
        sqlite_store = SqliteEdgeStore(path)
        empty = _file_bytes(path)
        changes = [
            EdgeChange(uid(rng.randrange(users)), uid(rng.randrange(users)), True, i + 1)
            for i in range(edges)
        ]
        for i in range(0, edges, 20_000):
            sqlite_store.apply(changes[i : i + 20_000])
        with sqlite3.connect(path) as db:
            stored_edges = int(db.execute("SELECT count(*) FROM edges").fetchone()[0])
        with_edges = _file_bytes(path)
        records = [PostRecord(uid(i % users), uid(i), NOW_MS + i, TEXT) for i in range(posts)]
        for i in range(0, posts, 5_000):
            sqlite_store.store_posts(records[i : i + 5_000])
        with_posts = _file_bytes(path)
        sqlite_store.close()

    store = wiring.edge_store(s)
    lists = wiring.list_store(s, store)
    timelines = wiring.timeline_store(s, store, lists.cache)
    servers = s.memcached_servers
    # Timeline entries: empty cached timelines, then posts delivered to all of them.
    readers = [uid(i) for i in range(200 if quick else 2_000)]
    before = memcached_bytes(servers)
    timelines.rebuild_many([ListRef(ListKind.TIMELINE, u) for u in readers])
    timeline_item = (memcached_bytes(servers) - before) / len(readers)
    before = memcached_bytes(servers)
    entries = 50 if quick else 400
    for k in range(entries):
        entry = TimelineEntry(NOW_MS + k, uid(10**6 + k), uid(10**7 + k))
        timelines.deliver([Delivery(token(True, entry.member), readers)])
    entry_bytes = (memcached_bytes(servers) - before) / (len(readers) * entries)
    # List members: cached (empty) follower lists, then follows through the graph applier;
    # the followers' own following lists are not cached (the applier skips them).
    authors = [uid(2 * 10**6 + i) for i in range(20 if quick else 200)]
    before = memcached_bytes(servers)
    lists.read_many([ListRef(ListKind.FOLLOWERS, a) for a in authors])
    list_items = (memcached_bytes(servers) - before) / len(authors)
    before = memcached_bytes(servers)
    members = 100 if quick else 1_000
    applier = GraphApplier(store, lists)
    batch = [
        Positioned(
            Follow(type="follow", follower=uid(3 * 10**6 + j), followee=a),
            (NOW_MS << 20) + n,
            Origin("sizes", 0, n, None),
            b"",
        )
        for n, (a, j) in enumerate(itertools.product(authors, range(members)))
    ]
    for i in range(0, len(batch), 10_000):
        applier.apply(batch[i : i + 10_000])
    member_bytes = (memcached_bytes(servers) - before) / (len(authors) * members)
    store.close()
    lists.cache.close()
    formats = model.format_sizes()
    return {
        "timeline_entry_bytes": round(entry_bytes, 2),
        "list_member_bytes": round(member_bytes, 2),
        "empty_timeline_bytes": round(timeline_item, 1),
        "empty_list_bytes": round(list_items, 1),
        "store_edge_bytes": round((with_edges - empty) / stored_edges, 1),
        "store_post_bytes": round((with_posts - with_edges) / posts, 1),
        "format_timeline_entry_bytes": formats["timeline_entry_bytes"],
        "format_list_member_bytes": formats["list_member_bytes"],
        "edges_measured": stored_edges,
        "posts_measured": posts,
    }


# -- the mixed load ---------------------------------------------------------------------------


def zipf_cum(users: int, s: float) -> list[float]:
    return list(itertools.accumulate(r**-s for r in range(1, users + 1)))


def zipf_followees(rng: random.Random, cum: list[float], k: int) -> list[int]:
    total = cum[-1]
    hi = len(cum) - 1
    return [bisect.bisect(cum, rng.random() * total, 0, hi) for _ in range(k)]


SMALL_USERS = 10_000  # the baseline graph: graph-ingest's user count, 10 follows each


def is_active(i: int) -> bool:
    """30% of users, spread over every rank (``capacity_model.ACTIVE_FRACTION``)."""
    return i % 10 < 3


def build_graph(s: Settings, users: int, edges: int) -> tuple[int, float]:
    """Writes ``edges`` Zipf follows to the edge store (no lists touched: a bulk load), then
    returns the distinct edges stored and the seconds taken."""
    rng = random.Random(11)
    cum = zipf_cum(users, model.ZIPF_S)
    store = wiring.edge_store(s)
    started = time.perf_counter()
    pos = 1
    batch = 100_000
    for done in range(0, edges, batch):
        n = min(batch, edges - done)
        followees = zipf_followees(rng, cum, n)
        changes = []
        for followee in followees:
            follower = rng.randrange(users)
            if follower != followee:
                changes.append(EdgeChange(uid(follower), uid(followee), True, pos))
                pos += 1
        store.apply(changes)
        print(f"  graph: {done + n:,} of {edges:,} follows", flush=True)
    store.close()
    path = s.edge_store.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        stored = int(db.execute("SELECT count(*) FROM edges").fetchone()[0])
    return stored, time.perf_counter() - started


def warm(s: Settings, active: Sequence[str]) -> float:
    """The active users' follower and following lists and timelines, rebuilt from the store
    (what their first reads would do)."""
    started = time.perf_counter()
    store = wiring.edge_store(s)
    lists = wiring.list_store(s, store)
    timelines = wiring.timeline_store(s, store, lists.cache)
    for i in range(0, len(active), 2_000):
        chunk = active[i : i + 2_000]
        lists.read_many([ListRef(k, u) for u in chunk for k in (ListKind.FOLLOWERS,)])
        lists.read_many([ListRef(ListKind.FOLLOWING, u) for u in chunk])
        timelines.rebuild_many([ListRef(ListKind.TIMELINE, u) for u in chunk])
    store.close()
    lists.cache.close()
    return time.perf_counter() - started


@dataclass
class Scrape:
    deliveries: float = 0.0
    skipped: float = 0.0
    events: float = 0.0
    lag: float = 0.0


_SAMPLE = re.compile(rb"^([a-z_]+)(?:\{[^}]*\})? ([0-9.e+-]+)$", re.M)


def scrape(port: int) -> Scrape:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read()
    got = Scrape()
    for name, value in _SAMPLE.findall(text):
        v = float(value)
        if name == b"fanout_deliveries_total":
            got.deliveries += v
        elif name == b"fanout_deliveries_skipped_total":
            got.skipped += v
        elif name == b"fanout_events_applied_total":
            got.events += v
        elif name == b"fanout_consumer_lag":
            got.lag += v
    return got


@dataclass
class Consumer:
    which: str
    process: subprocess.Popen[bytes]
    port: int
    samples: list[Scrape] = field(default_factory=list)

    def sample(self) -> Scrape:
        got = scrape(self.port)
        self.samples.append(got)
        return got


def start_consumer(s: Settings, which: str, log: Path) -> Consumer:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "timeline_fanout", "consume", which, "--metrics-port", str(port)],
        env=environment(s),
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            scrape(port)
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"fanout consume {which} did not start (see {log})") from None
            time.sleep(0.2)
    return Consumer(which, process, port)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def burst(s: Settings, consumer: Consumer, events: Iterable[dict[str, str]]) -> Row:
    """Publishes ``events`` as fast as the publisher goes, then waits until ``consumer`` has
    applied them all and has no lag: events, deliveries and CPU per second of that."""
    before, cpu0 = consumer.sample(), process_cpu_s(consumer.process.pid)
    started = time.perf_counter()
    n = 0
    with wiring.publisher(s) as publisher:
        for event in events:
            publisher.publish(event)
            n += 1
    published_s = time.perf_counter() - started
    deadline = started + 600
    while time.perf_counter() < deadline:
        now = consumer.sample()
        if now.events - before.events >= n and now.lag == 0:
            break
        time.sleep(0.2)
    elapsed = time.perf_counter() - started
    cpu = process_cpu_s(consumer.process.pid) - cpu0
    deliveries = now.deliveries - before.deliveries + now.skipped - before.skipped
    return {
        "events": n,
        "applied": now.events - before.events,
        "publish_s": round(published_s, 1),
        "seconds": round(elapsed, 1),
        "events_per_s": round(n / elapsed, 1),
        "cpu_s": round(cpu, 1),
        "events_per_cpu_s": round(n / max(cpu, 1e-6), 1),
        "deliveries": deliveries,
        "deliveries_per_event": round(deliveries / max(n, 1), 2),
    }


def burst_events(
    users: int, active: Sequence[str], rng: random.Random
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The bursts' events: posts by active users drawn uniformly (no text), and follows by
    active users of Zipf-drawn followees."""
    n_posts, n_follows = int(_env("BURST_POSTS", 20_000)), int(_env("BURST_FOLLOWS", 50_000))
    cum = zipf_cum(users, model.ZIPF_S)
    posts = [
        {"type": "post", "author": active[rng.randrange(len(active))], "post_id": f"b{n}"}
        for n in range(n_posts)
    ]
    follows = [
        {"type": "follow", "follower": active[rng.randrange(len(active))], "followee": uid(f)}
        for f in zipf_followees(rng, cum, n_follows)
    ]
    return posts, follows


def small_graph_bursts(s: Settings) -> Iterator[Row]:
    """The bursts of the run, on a graph of ``SMALL_USERS`` users built and cached the same
    way, with their own consumers: the baseline, in the same run, for the bursts' rates."""
    users = SMALL_USERS
    active = [uid(i) for i in range(users) if is_active(i)]
    stored, _ = build_graph(s, users, 10 * users)
    warm(s, active)
    posts, follows = burst_events(users, active, random.Random(7))
    logs = Path(tempfile.mkdtemp(prefix="bench-capacity-small-"))
    for which, events in (("fanout", posts), ("graph", follows)):
        consumer = start_consumer(s, which, logs / f"{which}.log")
        try:
            row = burst(s, consumer, events)
        finally:
            stop(consumer.process)
        yield {
            "row": "burst",
            "consumer": which,
            "graph": "small",
            "users": users,
            "edges_stored": stored,
            **row,
        }


def paced(rate: float, seconds: float, stop_at: threading.Event) -> Iterator[int]:
    """Yields 0, 1, 2, ... at ``rate`` per second for ``seconds`` (catching up after a stall)."""
    started = time.perf_counter()
    for n in itertools.count():
        due = started + n / rate
        if due - started >= seconds or stop_at.is_set():
            return
        wait = due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        yield n


def mixed_load(s: Settings, users: int, edges: int) -> Iterator[Row]:
    seconds = _env("SECONDS", 180)
    posts_per_s = _env("POSTS_PER_S", 200)
    follows_per_s = _env("FOLLOWS_PER_S", 100)
    reads_per_s = _env("READS_PER_S", 300)
    active = [uid(i) for i in range(users) if is_active(i)]
    base_bytes = memcached_bytes(s.memcached_servers)
    stored, build_s = build_graph(s, users, edges)
    # The probe: an author outside the graph with one follower, both cached.
    prober, probe_author = uid(users), uid(users + 1)
    store = wiring.edge_store(s)
    store.apply([EdgeChange(prober, probe_author, True, 1)])
    store.close()
    warm_s = warm(s, [*active, prober, probe_author])
    warm_bytes = memcached_bytes(s.memcached_servers) - base_bytes
    yield {
        "row": "graph",
        "users": users,
        "follows_generated": edges,
        "edges_stored": stored,
        "build_s": round(build_s, 1),
        "active_users_cached": len(active),
        "warm_s": round(warm_s, 1),
        "cache_bytes_after_warm": warm_bytes,
    }

    logs = Path(tempfile.mkdtemp(prefix="bench-capacity-"))
    graph = start_consumer(s, "graph", logs / "graph.log")
    fanout = start_consumer(s, "fanout", logs / "fanout.log")
    done = threading.Event()
    read_ms: list[float] = []
    statuses: dict[int, int] = {}
    probe_ms: list[float] = []
    published = {"posts": 0, "follows": 0}
    rng = random.Random(5)
    cum = zipf_cum(users, model.ZIPF_S)

    def publish() -> None:
        with wiring.publisher(s) as publisher:
            per_tick = posts_per_s + follows_per_s
            for n in paced(per_tick, seconds, done):
                if rng.random() < posts_per_s / per_tick:
                    author = active[rng.randrange(len(active))]
                    publisher.publish(
                        {"type": "post", "author": author, "post_id": uid(n), "text": TEXT}
                    )
                    published["posts"] += 1
                else:
                    followee = uid(zipf_followees(rng, cum, 1)[0])
                    follower = uid(rng.randrange(users))
                    if follower != followee:
                        publisher.publish(
                            {"type": "follow", "follower": follower, "followee": followee}
                        )
                        published["follows"] += 1

    def read(base: str, offset: int, rate: float) -> None:
        host, port = base.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        pick = random.Random(offset)
        for _ in paced(rate, seconds, done):
            user = active[pick.randrange(len(active))]
            started = time.perf_counter()
            conn.request("GET", f"/v1/timelines/{user}?limit=50")
            response = conn.getresponse()
            response.read()
            # 404: a user who follows nobody and was never followed is unknown to the store
            statuses[response.status] = statuses.get(response.status, 0) + 1
            read_ms.append((time.perf_counter() - started) * 1000)
        conn.close()

    def probe() -> None:
        reader_store = wiring.edge_store(s)
        reader = wiring.timeline_reader(s, reader_store)
        with wiring.publisher(s) as publisher:
            for n in paced(0.5, seconds, done):
                post_id = f"probe{n}"
                publisher.publish({"type": "post", "author": probe_author, "post_id": post_id})
                publisher.flush()
                started = time.perf_counter()
                while time.perf_counter() - started < 60:
                    entries = reader.read(prober, limit=1)
                    if entries and entries[0].post_id == post_id:
                        probe_ms.append((time.perf_counter() - started) * 1000)
                        break
                    time.sleep(0.01)
        reader_store.close()

    lag: dict[str, float] = {"graph": 0.0, "fanout": 0.0}

    def sample() -> None:
        while not done.wait(2.0):
            for c in (graph, fanout):
                lag[c.which] = max(lag[c.which], c.sample().lag)

    with api_process(s, "--workers", "1", log=logs / "api.log") as served:
        cpu0 = {c.which: process_cpu_s(c.process.pid) for c in (graph, fanout)}
        api_cpu0 = process_cpu_s(served.pid)
        first = {c.which: c.sample() for c in (graph, fanout)}
        threads = [
            threading.Thread(target=publish),
            threading.Thread(target=probe),
            threading.Thread(target=sample),
            *(
                threading.Thread(target=read, args=(served.base, k, reads_per_s / 2))
                for k in range(2)
            ),
        ]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in (*threads[:2], *threads[3:]):
            t.join()
        load_s = time.perf_counter() - started
        # Drain: until both consumers have no lag (or a minute).
        drain_started = time.perf_counter()
        while time.perf_counter() - drain_started < 60:
            if graph.sample().lag == 0 and fanout.sample().lag == 0:
                break
            time.sleep(0.5)
        drain_s = time.perf_counter() - drain_started
        done.set()
        threads[2].join()
        api_cpu = process_cpu_s(served.pid) - api_cpu0
        cpu = {c.which: process_cpu_s(c.process.pid) - cpu0[c.which] for c in (graph, fanout)}
        last = {c.which: c.sample() for c in (graph, fanout)}
    cache_bytes = memcached_bytes(s.memcached_servers) - base_bytes
    # Saturation: a burst of posts, then of follows, each applied as fast as one process can.
    posts, follows = burst_events(users, active, rng)
    post_burst = burst(s, fanout, posts)
    follow_burst = burst(s, graph, follows)
    stop(graph.process)
    stop(fanout.process)

    deliveries = last["fanout"].deliveries - first["fanout"].deliveries
    skipped = last["fanout"].skipped - first["fanout"].skipped
    graph_events = last["graph"].events - first["graph"].events
    fanout_events = last["fanout"].events - first["fanout"].events
    yield {
        "row": "load",
        "seconds": round(load_s, 1),
        "posts_per_s": posts_per_s,
        "follows_per_s": follows_per_s,
        "reads_per_s": reads_per_s,
        "posts_published": published["posts"],
        "follows_published": published["follows"],
        "reads_done": len(read_ms),
        "read_statuses": {str(k): v for k, v in sorted(statuses.items())},
        "reads_per_s_done": round(len(read_ms) / load_s, 1),
        "read_p50_ms": round(statistics.median(read_ms), 2) if read_ms else None,
        "read_p99_ms": round(sorted(read_ms)[int(len(read_ms) * 0.99)], 2) if read_ms else None,
        "api_cpu_ms_per_read": round(api_cpu * 1000 / max(len(read_ms), 1), 3),
        "deliveries": deliveries,
        "deliveries_skipped": skipped,
        "deliveries_per_s": round(deliveries / load_s, 1),
        "fanout_events": fanout_events,
        "fanout_cpu_s": round(cpu["fanout"], 1),
        "deliveries_per_fanout_cpu_s": round(deliveries / max(cpu["fanout"], 1e-6), 1),
        "graph_events": graph_events,
        "graph_cpu_s": round(cpu["graph"], 1),
        "graph_events_per_cpu_s": round(graph_events / max(cpu["graph"], 1e-6), 1),
        "max_lag_graph": lag["graph"],
        "max_lag_fanout": lag["fanout"],
        "drain_s": round(drain_s, 1),
        "probe_posts": len(probe_ms),
        "probe_p50_ms": round(statistics.median(probe_ms), 1) if probe_ms else None,
        "probe_max_ms": round(max(probe_ms), 1) if probe_ms else None,
        "cache_bytes": cache_bytes,
    }
    yield {"row": "burst", "consumer": "fanout", "graph": "run", **post_burst}
    yield {"row": "burst", "consumer": "graph", "graph": "run", **follow_burst}


# -- raising a topic's partition count while a producer runs ----------------------------------

PARTITIONS_BEFORE, PARTITIONS_AFTER = 2, 6


def partition_change(s: Settings, keys: int = 200, rate: float = 1_000, seconds: float = 8) -> Row:
    """Publishes follows for ``keys`` followees (the key), each with a rising sequence number in
    its follower id, at ``rate`` per second; after a quarter of the time raises the graph
    topic from ``PARTITIONS_BEFORE`` to ``PARTITIONS_AFTER`` partitions. Then reads every
    partition back: which keys now sit in two partitions, whether each partition kept its
    keys' order, how many keys' events alternate between two partitions, and how long the
    producer took to notice (its metadata refresh)."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        NewPartitions,
    )

    from timeline_fanout.producers import EventPublisher

    topic = s.topics.graph
    refresh_ms = 1_000  # librdkafka's default is 300,000: five minutes of the old count
    # Two producers, as two app servers: one refreshes its metadata every second, the other
    # keeps librdkafka's default (5 minutes) and so the old partition count for this whole run.
    publishers = [
        EventPublisher(s.kafka, s.topics, {"topic.metadata.refresh.interval.ms": refresh_ms}),
        EventPublisher(s.kafka, s.topics),
    ]
    raised_at: list[float] = []
    raise_after = seconds / 4
    started = time.time()
    for n in paced(rate, seconds, threading.Event()):
        if not raised_at and time.time() - started >= raise_after:
            admin = AdminClient({"bootstrap.servers": s.kafka})
            for future in admin.create_partitions(
                [NewPartitions(topic, PARTITIONS_AFTER)]
            ).values():
                future.result(30)
            raised_at.append(time.time())
        key = uid(n % keys)
        event = {"type": "follow", "follower": f"s{n:09d}", "followee": key}
        publishers[n // keys % 2].publish(event)  # each key's events alternate producers
    for publisher in publishers:
        publisher.flush()

    consumer = Consumer(
        {
            "bootstrap.servers": s.kafka,
            "group.id": f"{s.group}-partitions",
            "enable.auto.commit": False,
        }
    )
    seen: dict[str, list[tuple[int, int, float]]] = {}  # key -> (partition, seq, broker time)
    for p in range(PARTITIONS_AFTER):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        if high <= low:
            continue
        consumer.assign([TopicPartition(topic, p, low)])
        read = low
        while read < high:
            msg = consumer.poll(5)
            if msg is None or msg.error():
                continue
            value = orjson.loads(msg.value() or b"{}")
            seq = int(value["follower"][1:])
            _kind, ts = msg.timestamp()
            seen.setdefault(value["followee"], []).append((p, seq, ts / 1000))
            read = (msg.offset() or 0) + 1
    consumer.close()

    split = {k: v for k, v in seen.items() if len({p for p, _, _ in v}) > 1}
    # Order is Kafka's per producer and partition (two producers' writes to one partition
    # interleave however their batches land, with or without a partition change).
    in_order = all(
        [q for q in seqs if q // keys % 2 == producer]
        == sorted(q for q in seqs if q // keys % 2 == producer)
        for events in seen.values()
        for p in range(PARTITIONS_AFTER)
        for seqs in [[seq for q, seq, _ in events if q == p]]
        for producer in (0, 1)
    )
    new_partition_times = [
        ts for events in seen.values() for p, _, ts in events if p >= PARTITIONS_BEFORE
    ]
    # A split key whose sequence goes back and forth between partitions: its events are in
    # two logs at once, and two consumers apply them in whatever order they run.
    overtaken = sum(
        1
        for events in split.values()
        if max(seq for p, seq, _ in events if p < PARTITIONS_BEFORE)
        > min(seq for p, seq, _ in events if p >= PARTITIONS_BEFORE)
    )
    return {
        "row": "partitions",
        "before": PARTITIONS_BEFORE,
        "after": PARTITIONS_AFTER,
        "keys": len(seen),
        "events": sum(map(len, seen.values())),
        "keys_in_two_partitions": len(split),
        "expected_share_moved": round(1 - PARTITIONS_BEFORE / PARTITIONS_AFTER, 3),
        "measured_share_moved": round(len(split) / max(len(seen), 1), 3),
        "order_kept_per_producer_and_partition": in_order,
        "keys_interleaved_across_partitions": overtaken,
        "producer_refresh_ms": refresh_ms,
        "first_new_partition_message_after_raise_s": round(
            min(new_partition_times) - raised_at[0], 2
        )
        if new_partition_times and raised_at
        else None,
    }
