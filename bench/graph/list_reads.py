"""3. List reads: read+decode latency of a follower list of N members, next to the covered
edge-store query for the same list."""

from __future__ import annotations

from bench.support.graph_builder import build_followers
from bench.support.report import Report, percentiles, timed
from timeline_fanout.cli import wiring
from timeline_fanout.cli.sandbox import sandbox
from timeline_fanout.cli.settings import Settings
from timeline_fanout.consumers.graph_apply import GraphApplier
from timeline_fanout.graph import ListKind, ListRef

SIZES = [1_000, 100_000, 1_000_000]
QUICK = [1_000, 10_000]


def run(settings: Settings, report: Report) -> None:
    bars = []
    for n in QUICK if report.quick else SIZES:
        with sandbox(settings, "blst") as s:
            cache, edge = _measure(s, n)
        report.add(
            members=n,
            cache_p50_ms=cache["p50_ms"],
            cache_p99_ms=cache["p99_ms"],
            store_p50_ms=edge["p50_ms"],
            store_p99_ms=edge["p99_ms"],
            store_over_cache=round(edge["p50_ms"] / cache["p50_ms"], 2),
        )
        bars += [(f"{n:,} cache", cache["p50_ms"]), (f"{n:,} store", edge["p50_ms"])]
    report.write(bars, "p50 read latency (ms)")


def _measure(s: Settings, n: int) -> tuple[dict[str, float], dict[str, float]]:
    store = wiring.edge_store(s)
    lists = wiring.list_store(s, store)
    build_followers(GraphApplier(store, lists), "author", n)
    ref = ListRef(ListKind.FOLLOWERS, "author")
    assert len(lists.read(ref)) == n
    repeat = 5 if n >= 1_000_000 else 20
    cache = percentiles(timed(lambda: lists.read(ref), repeat))
    edge = percentiles(timed(lambda: store.all_members(ref), repeat))
    store.close()
    return cache, edge
