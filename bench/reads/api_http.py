"""6. The HTTP API under ``wrk``: home timeline reads/s and p50/p99 at 16, 64 and 256
connections against a 10k-user graph, and author pages at 16 and 64, next to the same server's
``/healthz`` at the same concurrency (the framework's ceiling, measured in the same run, in
alternation: ``ROUNDS``). The timeline rows are reads of unchanged pages, which each worker's
page memo answers; a second server with no memo gives the reads of pages that changed since
(``walked_timeline`` rows, at 16 and 64).

The graph (each user follows 20 others; 5 posts per user over the last day, each with a text of
``TEXT_LEN`` characters) is written to the edge store directly, and every timeline, post body
and author page is materialised in memcached before the server starts, as the consumers and
earlier readers would leave them; the read path is the one after that. Timeline paths cycle
through every user (each wrk thread from its own offset), so reads spread over the cache
instead of hitting one hot item. ``FANOUT_BENCH_API_WORKERS`` (default 2, one per core here)
sets ``fanout serve --workers``; ``FANOUT_API_THREADS`` and the other API settings pass through
the environment.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from typing import Any

from bench.cache.key_reads import watching
from bench.support.report import Report
from bench.support.server import api_server
from bench.support.wrk import WrkError, WrkResult, run_wrk
from timeline_fanout.cli import wiring
from timeline_fanout.cli.sandbox import sandbox
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph.model.edges import EdgeChange, PostRecord

FOLLOWS_PER_USER = 20
POSTS_PER_USER = 5
CONNECTIONS = (16, 64, 256)
SIDE_CONNECTIONS = (16, 64)  # author pages, and reads without the memo
LIMIT = 50
TEXT_LEN = 140
# A worker keeps a page in its memo from its second read of it (the first remembers the list's
# head), and each read goes to a worker at random: with WARM_PASSES_PER_WORKER passes per worker,
# a worker of two reads a page fewer than twice with probability 13/4096 (12 reads, half each).
WARM_PASSES_PER_WORKER = 6
# Timeline and /healthz runs at each concurrency, in this many alternating pairs: the machine
# drifts between a fast and a slow state within minutes (the same code's share of the ceiling
# moved between 0.33 and 0.71 from one 4 s pair to the next), so a ratio is only as good as
# the closeness in time of what it divides.
ROUNDS = 5


def run(settings: Settings, report: Report) -> None:
    users = 1_000 if report.quick else 10_000
    seconds = 1.0 if report.quick else 8.0
    workers = os.environ.get("FANOUT_BENCH_API_WORKERS", "2")
    with sandbox(settings, "bapi") as s:
        names = _build_graph(s, users)
        warm_s = _materialise(s, names)
        rng = random.Random(6)
        order = rng.sample(names, len(names))
        paths = [f"/v1/timelines/{u}?limit={LIMIT}" for u in order]
        author_paths = [f"/v1/users/{u}/posts?limit={LIMIT}" for u in order]
        rounds = 2 if report.quick else ROUNDS
        # A quick run only shows that the bench runs: one pass warms enough for that.
        passes = 1 if report.quick else WARM_PASSES_PER_WORKER * int(workers)
        with api_server(s, "--workers", workers) as base:
            # Warm the server (connections, code paths, and each worker's page memo): every
            # page read ``passes`` times over, whatever the machine's speed.
            _warm(base, paths, passes * len(paths))
            _warm(base, author_paths, passes * len(paths))
            results = _measure(base, paths, seconds, rounds, CONNECTIONS)
            authors = _measure(base, author_paths, seconds, rounds, SIDE_CONNECTIONS)
            report.add(**_key_reads("timeline", base, paths, s))
        # The same reads with no page memo: what a read costs when its page changed since the
        # worker last rendered it (every read walked and rendered).
        with api_server(s, "--workers", workers, FANOUT_API_PAGE_MEMO_MB="0") as base:
            _warm(base, paths, passes * len(paths))
            walked = _measure(base, paths, seconds, rounds, SIDE_CONNECTIONS)
            report.add(**_key_reads("walked_timeline", base, paths, s))
    bars = []
    for c, pairs in authors.items():
        report.add(**_side_row("author_pages", c, pairs))
        bars.append((f"author pages c{c}", _rate([t for t, _ in pairs])))
    for c, pairs in walked.items():
        report.add(**_side_row("walked_timeline", c, pairs))
        bars.append((f"no memo c{c}", _rate([t for t, _ in pairs])))
    for c, pairs in results.items():
        tl, health = [t for t, _ in pairs], [h for _, h in pairs]
        report.add(  # latencies: the median of the runs' percentiles (wrk's cannot be merged)
            connections=c,
            timeline_per_s=_rate(tl),
            timeline_p50_ms=statistics.median(r.p50_ms for r in tl),
            timeline_p99_ms=statistics.median(r.p99_ms for r in tl),
            timeline_p99_worst_ms=max(r.p99_ms for r in tl),
            healthz_per_s=_rate(health),
            healthz_p50_ms=statistics.median(r.p50_ms for r in health),
            healthz_p99_ms=statistics.median(r.p99_ms for r in health),
            **_shares(pairs),
            rounds=len(pairs),
            users=users,
            workers=int(workers),
            threads=int(os.environ.get("FANOUT_API_THREADS", "8")),
            warm_s=warm_s,
        )
        bars += [(f"timeline c{c}", _rate(tl)), (f"healthz c{c}", _rate(health))]
    report.write(bars, "requests/s (wrk)")


def _side_row(name: str, c: int, pairs: list[tuple[WrkResult, WrkResult]]) -> dict[str, Any]:
    """A row of the runs beside the main one (author pages, reads without the memo)."""
    return {
        "connections": c,
        f"{name}_per_s": _rate([t for t, _ in pairs]),
        f"{name}_p50_ms": statistics.median(t.p50_ms for t, _ in pairs),
        f"{name}_p99_ms": statistics.median(t.p99_ms for t, _ in pairs),
        "healthz_per_s": _rate([h for _, h in pairs]),
        **_shares(pairs),
    }


def _shares(pairs: list[tuple[WrkResult, WrkResult]]) -> dict[str, Any]:
    """Each pair's rate over its ``/healthz`` rate: the median, and all of them."""
    shares = sorted(t.per_s / h.per_s for t, h in pairs)
    return {
        "of_ceiling": round(statistics.median(shares), 3),
        "of_ceiling_pairs": [round(share, 3) for share in shares],
    }


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
            PostRecord(name, f"p{i}x{k}", now - rng.randrange(86_400_000), _text(rng))
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
            reader.author_pages.page(name, LIMIT, None)
    finally:
        store.close()
    return round(time.perf_counter() - started, 1)


def _key_reads(name: str, base: str, paths: list[str], s: Settings) -> dict[str, Any]:
    """A c=16 run with every memcached server's fetches counted per key: no key may be on
    every read (the hottest key's fetches per request is the figure)."""
    with watching(s.memcached_servers) as fetches:
        requests = run_wrk(base, paths, 16, 2.0).requests
    return {
        f"{name}_requests_watched": requests,
        f"{name}_fetches_per_request": round(sum(fetches.per_key.values()) / max(requests, 1), 2),
        f"{name}_hottest_keys": fetches.hottest(requests),
        f"{name}_watch_lines_skipped": fetches.skipped,
    }


def _warm(base: str, paths: list[str], reads: int) -> None:
    """wrk at c=16 until at least ``reads`` requests were answered."""
    done = 0
    while done < reads:
        done += run_wrk(base, paths, 16, 2.0).requests


def _text(rng: random.Random) -> str:
    return "".join(rng.choices("abcdefghij klmnopqrst uvwxyz", k=TEXT_LEN))


def _measure(
    base: str, paths: list[str], seconds: float, rounds: int, connections: tuple[int, ...]
) -> dict[int, list[tuple[WrkResult, WrkResult]]]:
    """At each concurrency, ``rounds`` pairs of a timeline run and a ``/healthz`` run of
    ``seconds / rounds`` each, the order flipped every pair (t h, h t, t h, ...), so that a slow
    moment of the (shared) machine hits both sides of a ratio rather than one."""
    results: dict[int, list[tuple[WrkResult, WrkResult]]] = {}
    each = max(1.0, seconds / rounds)
    for c in connections:
        pairs = []
        for round_ in range(rounds):
            first, second = (paths, ["/healthz"]) if round_ % 2 == 0 else (["/healthz"], paths)
            got = [_answered(base, first, c, each), _answered(base, second, c, each)]
            for name, result in zip((first[0], second[0]), got, strict=True):
                if result.non_2xx or result.socket_errors:
                    raise WrkError(
                        f"{name} at c={c}: {result.non_2xx} non-2xx, "
                        f"{result.socket_errors} socket errors"
                    )
            timeline, health = got if round_ % 2 == 0 else got[::-1]
            pairs.append((timeline, health))
        results[c] = pairs
    return results


def _answered(base: str, paths: list[str], c: int, seconds: float) -> WrkResult:
    """A run in which some request was answered: one that the shared machine let nothing
    through (a quick run is one second long) measured nothing, and is run again."""
    for _ in range(3):
        result = run_wrk(base, paths, c, seconds)
        if result.requests:
            return result
    raise WrkError(f"{paths[0]} at c={c}: no request answered in three runs")


def _rate(runs: list[WrkResult]) -> float:
    """Requests per second over the runs' whole time."""
    return round(sum(r.requests for r in runs) / sum(r.requests / r.per_s for r in runs), 1)
