"""Fan-out appends alone: ``Cache.append_to_each`` of one timeline token to N timelines that
exist, on the stack's memcached servers, next to the wire's limit measured in the same run
(``raw_memcached.noreply_limit``: appends nobody checks, to one server). No broker, no store:
the client's own cost per append (CPU, this process) and its rate against the limit."""

from __future__ import annotations

import statistics
import time

from bench.cache.raw_memcached import TOKEN, noreply_limit
from bench.support.report import Report
from timeline_fanout.cli.sandbox import sandbox
from timeline_fanout.cli.settings import Settings
from timeline_fanout.memcache import AppendGroup, MemcacheCluster

SIZES = [100_000, 1_000_000]
QUICK = [2_000]
REPEAT = 5


def run(settings: Settings, report: Report) -> None:
    sizes = QUICK if report.quick else SIZES
    bars: list[tuple[str, float]] = []
    with sandbox(settings, "bapp") as s:
        cluster = MemcacheCluster(s.memcached_servers)
        limit = noreply_limit(s.memcached_servers[0], max(sizes))
        report.add(noreply_appends_per_s=round(limit), appends=max(sizes))
        bars.append(("noreply limit", limit))
        for n in sizes:
            keys = [b"%s|tl|f%d" % (s.cache_prefix.encode(), i) for i in range(n)]
            for i in range(0, n, 50_000):
                cluster.add_many(dict.fromkeys(keys[i : i + 50_000], b""))
            rates, cpu = [], []
            for _ in range(REPEAT):
                started, cpu_started = time.perf_counter(), time.process_time()
                refused = cluster.append_to_each([AppendGroup(TOKEN, keys)])
                cpu.append((time.process_time() - cpu_started) / n)
                rates.append(n / (time.perf_counter() - started))
                assert not refused, refused[:3]
            rate = statistics.median(rates)
            report.add(
                timelines=n,
                appends_per_s=round(rate),
                client_cpu_us_per_append=round(statistics.median(cpu) * 1e6, 2),
                ratio_to_noreply=round(rate / limit, 3),
            )
            bars.append((f"{n:,}", rate))
            cluster.delete_many(keys)
        cluster.close()
    report.write(bars, "timeline appends per second")
