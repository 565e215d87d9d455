"""11. Follower counts on the Mongo store: what a page's count costs when cached
(graph/lists/counts.py), beside what it cost counted on the store's index on every page (the
same-run baseline), and the first read after a change (the count filled again), for lists of
1k and 100k members, and 1M on a real MongoDB. The store is FANOUT_BENCH_MONGO_URL when set,
else a FerretDB server started for the run: its SQLite backend reads the whole collection to
count where MongoDB walks an index (8 s per count with 101k edges stored, whatever the list's
own size), so its recount only bounds MongoDB's from above, and with a 1M list it would take
about 80 s a count, 2 x RECOUNTS times; the cached read never touches the store, so its figure
does not depend on the server.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

from bench.support.report import Report, percentiles, timed
from timeline_fanout.cli import wiring
from timeline_fanout.cli.sandbox import sandbox
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph.lists.counts import CachedCounts
from timeline_fanout.graph.model.edges import EdgeChange, EdgeStore
from timeline_fanout_devstack import mongo_server, stack
from timeline_fanout_devstack.home import fanout_home

SIZES = {"l1k": 1_000, "l100k": 100_000}
ON_MONGODB = {**SIZES, "l1m": 1_000_000}
QUICK = {"l1k": 1_000, "l2k": 2_000}  # FerretDB counts by reading every edge stored
BATCH = 20_000  # edges per store write while building
READS = 200  # cached reads per list
RECOUNTS = 5  # recounts and fills per list


def run(settings: Settings, report: Report) -> None:
    real = "FANOUT_BENCH_MONGO_URL" in os.environ
    sizes = QUICK if report.quick else ON_MONGODB if real else SIZES
    with mongo_url() as url, sandbox(settings, "bcnt", edge_store=url) as s:
        store = wiring.edge_store(s)
        lists = wiring.list_store(s, store)
        counts = CachedCounts(lists.cache, store, lists.keys, s.cache_heal_s)
        try:
            _build(store, sizes)
            bars = []
            for owner, n in sizes.items():
                assert counts.counts(owner).followers == n
                recount = timed(lambda owner=owner: store.recounted(owner), RECOUNTS)
                cached = timed(lambda owner=owner: counts.counts(owner), READS)
                refilled = []
                for _ in range(RECOUNTS):
                    counts.changed([owner])  # what a graph batch that touched the list does
                    started = time.perf_counter()
                    counts.counts(owner)
                    refilled.append(time.perf_counter() - started)
                cached_p50 = percentiles(cached)["p50_ms"]
                recount_p50 = percentiles(recount)["p50_ms"]
                report.add(
                    members=n,
                    cached_count=percentiles(cached),
                    counted_every_page=percentiles(recount),
                    first_read_after_a_change=percentiles(refilled),
                    counted_over_cached=round(recount_p50 / cached_p50),
                    server="FANOUT_BENCH_MONGO_URL" if real else "FerretDB (SQLite backend)",
                )
                bars.append((f"{n:,}", cached_p50))
            report.write(bars, "cached count read p50 (ms)")
        finally:
            store.close()


@contextmanager
def mongo_url() -> Iterator[str]:
    if url := os.environ.get("FANOUT_BENCH_MONGO_URL"):
        yield url
        return
    logs = fanout_home() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    svc = stack.start_ferretdb(logs, time.monotonic() + 30)
    try:
        yield mongo_server.database_url(svc.address, f"bench_{secrets.token_hex(3)}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(svc.pid, signal.SIGTERM)


def _build(store: EdgeStore, sizes: dict[str, int]) -> None:
    pos = 0
    for owner, n in sizes.items():
        for start in range(0, n, BATCH):
            store.apply(
                [
                    EdgeChange(f"m{i:07d}", owner, True, pos + i)
                    for i in range(start, min(start + BATCH, n))
                ]
            )
        pos += n
