"""7. Follower pages under a real ``fanout serve``: the server's CPU time per page of lists of
1k, 100k and 1M members, beside a 200-member list's page measured in the same run (the
baseline). Pages start at random places (cursors anywhere in the list, as a client walking
or an attacker jumping would ask), ``limit`` 100 and 1, over one keep-alive connection, one
request at a time; the server's CPU is read from /proc before and after each batch, and the
lists take turns (``ROUNDS``) so the machine's drift spreads over all of them.
"""

from __future__ import annotations

import http.client
import random
import statistics
import time

from bench.support.process_cpu import process_cpu_s
from bench.support.report import Report, percentiles
from bench.support.server import api_process
from timeline_fanout.cli import wiring
from timeline_fanout.cli.sandbox import sandbox
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph.model.edges import EdgeChange

SIZES = {"small": 200, "l1k": 1_000, "l100k": 100_000, "l1m": 1_000_000}
QUICK = {"small": 200, "l1k": 1_000, "l10k": 10_000}
LIMITS = (100, 1)
ROUNDS = 3
BATCH = 20_000  # edges per store write while building


def run(settings: Settings, report: Report) -> None:
    sizes = QUICK if report.quick else SIZES
    requests = 50 if report.quick else 400
    rounds = 1 if report.quick else ROUNDS
    with sandbox(settings, "bpag") as s:
        _build(s, sizes)
        with api_process(s, "--workers", "1") as served:
            host, port = served.base.removeprefix("http://").split(":")
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
            cpu: dict[tuple[str, int], list[float]] = {}
            wall: dict[tuple[str, int], list[float]] = {}
            rng = random.Random(7)
            for _ in range(rounds):
                for owner, n in sizes.items():
                    for limit in LIMITS:
                        paths = [_path(owner, n, limit, rng) for _ in range(requests)]
                        spent, times = timed_gets(conn, served.pid, paths)
                        cpu.setdefault((owner, limit), []).append(spent / requests)
                        wall.setdefault((owner, limit), []).extend(times)
            conn.close()
    bars = []
    for owner, n in sizes.items():
        for limit in LIMITS:
            per_page = statistics.median(cpu[(owner, limit)]) * 1000
            base = statistics.median(cpu[("small", limit)]) * 1000
            report.add(
                members=n,
                limit=limit,
                server_cpu_ms_per_page=round(per_page, 3),
                small_list_cpu_ms_per_page=round(base, 3),
                over_small=round(per_page / base, 2),
                **percentiles(wall[(owner, limit)]),
            )
            if limit == LIMITS[0]:
                bars.append((f"{n:,}", per_page))
    report.write(bars, f"server CPU per page of {LIMITS[0]} (ms)")


def _build(s: Settings, sizes: dict[str, int]) -> None:
    store = wiring.edge_store(s)
    try:
        pos = 0
        for owner, n in sizes.items():
            for start in range(0, n, BATCH):
                batch = [
                    EdgeChange(f"m{i:07d}", owner, True, pos + i)
                    for i in range(start, min(start + BATCH, n))
                ]
                store.apply(batch)
            pos += n
    finally:
        store.close()


def _path(owner: str, n: int, limit: int, rng: random.Random) -> str:
    cursor = f"&cursor=m{rng.randrange(n):07d}" if rng.random() < 0.9 else ""
    return f"/v1/users/{owner}/followers?limit={limit}{cursor}"


def timed_gets(
    conn: http.client.HTTPConnection, pid: int, paths: list[str]
) -> tuple[float, list[float]]:

    times = []
    before = process_cpu_s(pid)
    for path in paths:
        started = time.perf_counter()
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        times.append(time.perf_counter() - started)
        if response.status != 200 or not body:
            raise RuntimeError(f"GET {path}: {response.status} {body[:200]!r}")
    return process_cpu_s(pid) - before, times
