"""8. Home timeline reads of users following many, under a real ``fanout serve``: the server's
CPU time per read of users following 1k, 20k and 100k, beside one following 20 measured in the
same run (the baseline). Every read asks for a page past a cursor no read asked before (as an
attacker varying cursors to miss the page memo would), so each read fetches the following list
and finds it decoded (graph/lists/decoded.py) or decodes it; the users take turns (``ROUNDS``).
"""

from __future__ import annotations

import http.client
import random
import statistics

from bench.reads.member_pages import timed_gets
from bench.support.report import Report, percentiles
from bench.support.server import api_process
from timeline_fanout.cli import wiring
from timeline_fanout.cli.sandbox import sandbox
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph.model.edges import EdgeChange

SIZES = {"f20": 20, "f1k": 1_000, "f20k": 20_000, "f100k": 100_000}
QUICK = {"f20": 20, "f1k": 1_000, "f20k": 20_000}
ROUNDS = 3
BATCH = 20_000


def run(settings: Settings, report: Report) -> None:
    sizes = QUICK if report.quick else SIZES
    requests = 20 if report.quick else 100
    rounds = 1 if report.quick else ROUNDS
    with sandbox(settings, "bhf") as s:
        _build(s, sizes)
        with api_process(s, "--workers", "1") as served:
            host, port = served.base.removeprefix("http://").split(":")
            conn = http.client.HTTPConnection(host, int(port), timeout=60)
            rng = random.Random(3)
            for user in sizes:  # the first read builds the lists: not measured
                timed_gets(conn, served.pid, [f"/v1/timelines/{user}"])
            cpu: dict[str, list[float]] = {}
            wall: dict[str, list[float]] = {}
            for _ in range(rounds):
                for user in sizes:
                    paths = [_fresh_cursor(user, rng) for _ in range(requests)]
                    spent, times = timed_gets(conn, served.pid, paths)
                    cpu.setdefault(user, []).append(spent / requests)
                    wall.setdefault(user, []).extend(times)
            conn.close()
    base = statistics.median(cpu["f20"]) * 1000
    bars = []
    for user, n in sizes.items():
        per_read = statistics.median(cpu[user]) * 1000
        report.add(
            following=n,
            server_cpu_ms_per_read=round(per_read, 3),
            following_20_cpu_ms_per_read=round(base, 3),
            over_following_20=round(per_read / base, 2),
            **percentiles(wall[user]),
        )
        bars.append((f"{n:,}", per_read))
    report.write(bars, "server CPU per timeline read past a new cursor (ms)")


def _build(s: Settings, sizes: dict[str, int]) -> None:
    """Each user follows ``n`` others; ``a0`` posted, so every timeline has an entry."""
    store = wiring.edge_store(s)
    try:
        pos = 0
        for user, n in sizes.items():
            for start in range(0, n, BATCH):
                store.apply(
                    [
                        EdgeChange(user, f"a{i}", True, pos + i)
                        for i in range(start, min(start + BATCH, n))
                    ]
                )
            pos += n
    finally:
        store.close()


def _fresh_cursor(user: str, rng: random.Random) -> str:
    ts = 1_700_000_000_000 + rng.randrange(10**9)
    return (
        f"/v1/timelines/{user}?limit=20&cursor={ts}!a{rng.randrange(10**6)}!p{rng.randrange(10**6)}"
    )
