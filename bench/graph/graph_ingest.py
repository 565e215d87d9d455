"""2. Graph ingest: follow/unfollow events per second end to end (Kafka to edge store and
lists) for the embedded SQLite store; MongoDB when FANOUT_BENCH_MONGO_URL is set. Each with
every user's lists in the cache, with none, and with the lists left untouched (the edge store
alone: what any list layout is measured against). The wire's limit is measured in the same run
(``raw_memcached.noreply_limit``), and each row's ratio to it (an event writes two lists). The
consumer process's CPU per event (its idle wait at the end included) says what each row's
work costs, whatever the machine's load did to its wall clock."""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Sequence

from bench.cache.raw_memcached import noreply_limit
from bench.support.process_cpu import process_cpu_s
from bench.support.report import Report, Row
from timeline_fanout.cli import gc_policy, wiring
from timeline_fanout.cli.sandbox import sandbox
from timeline_fanout.cli.settings import Settings
from timeline_fanout.consumers import ConsumeLoop, LoopStats, Positioned
from timeline_fanout.consumers.graph_apply import GRAPH_EVENTS, GraphApplier, GraphBatchResult
from timeline_fanout.consumers.pulse import Pulse, no_pulse
from timeline_fanout.graph import ListKind, ListRef

EVENTS = 50_000
QUICK = 2_000
LISTS = ("cached", "absent", "untouched")


def run(settings: Settings, report: Report) -> None:
    gc_policy.tune_for_consuming()  # the consumer runs here as `fanout consume` runs it
    n = QUICK if report.quick else EVENTS
    stores: dict[str, str | None] = {"sqlite": None}
    if url := os.environ.get("FANOUT_BENCH_MONGO_URL"):
        stores["mongodb"] = url
    with sandbox(settings, "bgnr") as s:  # the stack's servers, started if need be
        limit = noreply_limit(s.memcached_servers[0], 2_000 if report.quick else 1_000_000)
    report.add(noreply_appends_per_s=round(limit))
    bars = [("noreply limit (appends)", limit)]
    for name, url in stores.items():
        overrides = {"edge_store": url} if url else {}
        for lists in LISTS:
            with sandbox(settings, "bing", **overrides) as s:
                row = _one(s, n, lists)
            ratio = round(row["events_per_s"] / limit, 3)
            report.add(store=name, lists=lists, **row, ratio_to_noreply=ratio)
            bars.append((f"{name}, lists {lists}", row["events_per_s"]))
    if "mongodb" not in stores:
        report.add(store="mongodb", skipped="FANOUT_BENCH_MONGO_URL is not set")
    report.write(bars, "graph events per second (one consumer)")


def _one(s: Settings, n: int, lists: str) -> Row:
    """``cached``: every user's lists are in the cache, so every event appends to two lists
    (a live system's hot lists); ``absent``: none are, and writes only check and skip them;
    ``untouched``: the consumer writes the edge store and stops there."""
    rng = random.Random(1)
    users = 10_000
    if lists == "cached":
        store = wiring.edge_store(s)
        kinds = (ListKind.FOLLOWERS, ListKind.FOLLOWING)
        wiring.list_store(s, store).read_many(
            [ListRef(kind, f"u{i}") for i in range(users) for kind in kinds]
        )
        store.close()
    with wiring.publisher(s) as publisher:
        for _ in range(n):
            follower = f"u{rng.randrange(users)}"
            followee = f"u{min(int(rng.expovariate(0.001)), users - 1)}"
            kind = "follow" if rng.random() < 0.8 else "unfollow"
            publisher.publish({"type": kind, "follower": follower, "followee": followee})
    started, cpu_started = time.perf_counter(), process_cpu_s(os.getpid())
    loop = wiring.graph_loop(s, threading.Event())
    if lists == "untouched":
        assert isinstance(loop.applier, GraphApplier)
        loop.applier = _StoreOnly(loop.applier.store, loop.applier.lists)
    stats = _consume(loop)
    wall = time.perf_counter() - started
    cpu = process_cpu_s(os.getpid()) - cpu_started
    # Baseline: the same messages through the same loop (poll, decode and validate, commit)
    # with nothing applied, in a group of its own: the ceiling the broker and decoding set.
    decode_only = wiring.graph_loop(
        s.model_copy(update={"group": f"{s.group}-decode"}), threading.Event()
    )
    decode_only.applier = _Nothing()
    baseline = _consume(decode_only)
    rate = stats.applied / stats.busy_s
    ceiling = baseline.applied / baseline.busy_s
    return {
        "events": stats.applied,
        "events_per_s": round(rate),
        "decode_only_events_per_s": round(ceiling),
        "ratio_to_decode_only": round(rate / ceiling, 3),
        "consumer_cpu_us_per_event": round(cpu / max(stats.applied, 1) * 1e6, 1),
        "wall_s_incl_idle_wait": round(wall, 2),
        "batches": stats.batches,
        "ms_per_batch": round(stats.busy_s / max(stats.batches, 1) * 1000, 1),
    }


class _StoreOnly(GraphApplier):
    def apply(self, batch: Sequence[Positioned], pulse: Pulse = no_pulse) -> GraphBatchResult:
        recorded = self.record(batch)
        return GraphBatchResult(recorded.changes, len(recorded.live), recorded.removals)


class _Nothing:
    accepted = GRAPH_EVENTS

    def apply(self, batch: Sequence[Positioned], pulse: Pulse = no_pulse) -> None:
        pass


def _consume(loop: ConsumeLoop) -> LoopStats:
    loop.source.await_assignment()
    stats = loop.run(until_idle=2.0)
    loop.source.close()
    return stats
