"""6. The HTTP API under ``wrk``: home timeline reads/s and p50/p99 at 16, 64 and 256
connections against a 10k-user graph, next to the same server's ``/healthz`` at the same
concurrency (the framework's ceiling, measured in the same run).

The graph (each user follows 20 others; 5 posts per user over the last day) is written to the
edge store directly, and every timeline is materialised in memcached before the server starts,
as the consumers would leave them; the read path is the one after that. Timeline paths cycle
through every user (each wrk thread from its own offset), so reads spread over the cache
instead of hitting one hot item. ``FANOUT_BENCH_API_WORKERS`` (default 2, one per core here)
sets ``fanout serve --workers``; ``FANOUT_API_THREADS`` and the other API settings pass through
the environment.
"""

from __future__ import annotations

import os
import random
import time

from bench.report import Report
from bench.server import api_server
from bench.wrk import WrkError, WrkResult, run_wrk
from fanout import wiring
from fanout.sandbox import sandbox
from fanout.settings import Settings
from graph.edges import EdgeChange, PostRecord

FOLLOWS_PER_USER = 20
POSTS_PER_USER = 5
CONNECTIONS = (16, 64, 256)
LIMIT = 50


def run(settings: Settings, report: Report) -> None:
    users = 1_000 if report.quick else 10_000
    seconds = 1.0 if report.quick else 8.0
    workers = os.environ.get("FANOUT_BENCH_API_WORKERS", "2")
    with sandbox(settings, "bapi") as s:
        names = _build_graph(s, users)
        warm_s = _materialise(s, names)
        rng = random.Random(6)
        paths = [f"/v1/timelines/{u}?limit={LIMIT}" for u in rng.sample(names, len(names))]
        with api_server(s, "--workers", workers) as base:
            run_wrk(base, paths, 16, seconds)  # warm the server: connections, code paths
            results = _measure(base, paths, seconds)
    bars = []
    for c, (tl, health) in results.items():
        report.add(
            connections=c,
            timeline_per_s=tl.per_s,
            timeline_p50_ms=tl.p50_ms,
            timeline_p99_ms=tl.p99_ms,
            healthz_per_s=health.per_s,
            healthz_p50_ms=health.p50_ms,
            healthz_p99_ms=health.p99_ms,
            of_ceiling=round(tl.per_s / health.per_s, 3),
            users=users,
            workers=int(workers),
            threads=int(os.environ.get("FANOUT_API_THREADS", "8")),
            warm_s=warm_s,
        )
        bars += [(f"timeline c{c}", tl.per_s), (f"healthz c{c}", health.per_s)]
    report.write(bars, "requests/s (wrk)")


def _build_graph(s: Settings, users: int) -> list[str]:
    names = [f"u{i}" for i in range(users)]
    rng = random.Random(5)
    now = int(time.time() * 1000)
    store = wiring.edge_store(s)
    try:
        changes: list[EdgeChange] = []
        for name in names:
            followees = [f for f in rng.sample(names, FOLLOWS_PER_USER + 1) if f != name]
            for followee in followees[:FOLLOWS_PER_USER]:
                changes.append(EdgeChange(name, followee, True, len(changes) + 1))
        for start in range(0, len(changes), 10_000):
            store.apply(changes[start : start + 10_000])
        posts = [
            PostRecord(name, f"p{i}x{k}", now - rng.randrange(86_400_000))
            for i, name in enumerate(names)
            for k in range(POSTS_PER_USER)
        ]
        for start in range(0, len(posts), 10_000):
            store.store_posts(posts[start : start + 10_000])
    finally:
        store.close()
    return names


def _materialise(s: Settings, names: list[str]) -> float:
    """Every timeline and following list built into memcached (what the consumers keep)."""
    started = time.perf_counter()
    store = wiring.edge_store(s)
    try:
        reader = wiring.timeline_reader(s, store)
        for name in names:
            reader.read(name, limit=LIMIT)
    finally:
        store.close()
    return round(time.perf_counter() - started, 1)


def _measure(base: str, paths: list[str], seconds: float) -> dict[int, tuple[WrkResult, WrkResult]]:
    """Timeline then ``/healthz`` at each concurrency, alternating, so that a slow moment of
    the (shared) machine hits both sides of a ratio rather than one."""
    results = {}
    for c in CONNECTIONS:
        timeline = run_wrk(base, paths, c, seconds)
        health = run_wrk(base, ["/healthz"], c, seconds)
        for name, got in (("timeline", timeline), ("healthz", health)):
            if got.non_2xx or got.socket_errors:
                raise WrkError(
                    f"{name} at c={c}: {got.non_2xx} non-2xx, {got.socket_errors} socket errors"
                )
        results[c] = (timeline, health)
    return results
