"""4. Contended unfollow (the Membase manual's claim): 8 writers following and unfollowing on one
hot list, tombstone APPENDs versus the gets/cas retry loop."""

from __future__ import annotations

import threading
import time

from bench.support.report import Report, Row, percentiles
from timeline_fanout.cli import wiring
from timeline_fanout.cli.sandbox import sandbox
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph import ListKind, ListRef
from timeline_fanout.graph.lists.tokens import Change
from timeline_fanout.memcache import MemcacheCluster

WRITERS = 8
MAX_CAS_RETRIES = 100


def run(settings: Settings, report: Report) -> None:
    seconds = 1.0 if report.quick else 5.0
    bars = []
    with sandbox(settings, "bcon", list_compact_write_prob=0.0) as s:
        rows = {"tombstone_append": _tombstones(s, seconds), "gets_cas_loop": _cas_loop(s, seconds)}
    for scheme, row in rows.items():
        report.add(scheme=scheme, **row)
        bars.append((scheme, row["ops_per_s"]))
    report.add(
        append_over_cas=round(
            rows["tombstone_append"]["ops_per_s"] / max(rows["gets_cas_loop"]["ops_per_s"], 1), 2
        )
    )
    report.write(bars, "follow/unfollow operations per second (8 writers)")


def _drive(seconds: float, op: object) -> tuple[list[float], list[int]]:
    latencies: list[float] = []
    outcomes: list[int] = []  # retries per op, -1 for a failed op
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def writer(w: int) -> None:
        state = op(w)  # type: ignore[operator]
        i = 0
        while time.perf_counter() < stop:
            started = time.perf_counter()
            retries = state(f"w{w}m{i % 50}", i % 2 == 0)
            with lock:
                latencies.append(time.perf_counter() - started)
                outcomes.append(retries)
            i += 1

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, outcomes


def _row(seconds: float, latencies: list[float], outcomes: list[int]) -> Row:
    done = [r for r in outcomes if r >= 0]
    return {
        "ops": len(done),
        "ops_per_s": round(len(done) / seconds),
        "cas_retries": sum(done),
        "failed": outcomes.count(-1),
        **percentiles(latencies),
    }


def _tombstones(s: Settings, seconds: float) -> Row:
    ref = ListRef(ListKind.FOLLOWERS, "hot")
    store = wiring.edge_store(s)
    wiring.list_store(s, store).read(ref)  # create it
    store.close()

    def make(_w: int) -> object:
        lists = wiring.list_store(s, wiring.edge_store(s))

        def op(member: str, add: bool) -> int:
            lists.apply({ref: [Change(add, member, time.time_ns())]})
            return 0

        return op

    return _row(seconds, *_drive(seconds, make))


def _cas_loop(s: Settings, seconds: float) -> Row:
    key = f"{s.cache_prefix}|caslist".encode()
    MemcacheCluster(s.memcached_servers).add_many({key: b","})

    def make(_w: int) -> object:
        cache = MemcacheCluster(s.memcached_servers)

        def op(member: str, add: bool) -> int:
            for retries in range(MAX_CAS_RETRIES):
                value, cas_id, _ = cache.gets_many([key])[key]
                members = set(value.decode().strip(",").split(",")) - {""}
                (members.add if add else members.discard)(member)
                new = ("," + ",".join(sorted(members)) + ",").encode()
                if cache.cas(key, new, cas_id).ok:
                    return retries
            return -1

        return op

    return _row(seconds, *_drive(seconds, make))
