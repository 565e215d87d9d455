"""5. Timeline reads: p50/p99 for ordinary users and for users who follow a celebrity (merged
at read time), next to a plain GET of a value of the same size."""

from __future__ import annotations

import random
import threading

from bench.report import Report, Row, percentiles, timed
from fanout import wiring
from fanout.sandbox import sandbox
from fanout.settings import Settings
from graph import ListKind, ListRef

USERS = 300


def run(settings: Settings, report: Report) -> None:
    posts = 500 if report.quick else 5_000
    with sandbox(settings, "btl", celebrity_threshold=USERS // 2) as s:
        rows = _measure(s, posts, 20 if report.quick else 200)
    bars = []
    for kind, row in rows.items():
        report.add(readers=kind, **row)
        bars += [(f"{kind} timeline", row["p50_ms"]), (f"{kind} plain GET", row["get_p50_ms"])]
    report.write(bars, "p50 latency (ms)")


def _measure(s: Settings, posts: int, repeat: int) -> dict[str, Row]:
    rng = random.Random(2)
    with wiring.publisher(s) as publisher:
        for i in range(USERS):  # the celebrity: followed by the odd users
            if i % 2:
                publisher.publish({"type": "follow", "follower": f"u{i}", "followee": "celeb"})
            for j in rng.sample(range(USERS), 20):
                if j != i:
                    publisher.publish({"type": "follow", "follower": f"u{i}", "followee": f"u{j}"})
    graph = wiring.graph_loop(s, threading.Event())
    graph.run(until_idle=2.0)
    graph.source.close()
    with wiring.publisher(s) as publisher:
        for k in range(posts):
            author = "celeb" if k % 5 == 0 else f"u{rng.randrange(USERS)}"
            publisher.publish({"type": "post", "author": author, "post_id": f"p{k}"})
    loop = wiring.fanout_loop(s, threading.Event())
    loop.run(until_idle=2.0)
    loop.source.close()

    store = wiring.edge_store(s)
    reader = wiring.timeline_reader(s, store)
    cache = wiring.list_store(s, store).cache
    result = {}
    for kind, users in (
        ("ordinary", range(0, USERS, 2)),
        ("celebrity_follower", range(1, USERS, 2)),
    ):
        picks = [f"u{u}" for u in list(users)[:20]]
        for user in picks:
            reader.read(user)  # materialise: measure steady state, not regeneration
        samples = [
            t for u in picks for t in timed(lambda u=u: reader.read(u, limit=50), repeat // 20 or 1)
        ]
        tl_key = wiring.timeline_store(s, store, cache).index_key(
            ListRef(ListKind.TIMELINE, picks[0])
        )
        size = sum(len(v) for v in cache.get_many([tl_key]).values()) + 50 * 40
        cache.set_many({b"plainget": b"x" * size})
        gets = timed(lambda: cache.get_many([b"plainget"]), repeat)
        row = percentiles(samples)
        plain = percentiles(gets)
        result[kind] = {
            **row,
            "get_p50_ms": plain["p50_ms"],
            "get_p99_ms": plain["p99_ms"],
            "over_plain_get": round(row["p50_ms"] / plain["p50_ms"], 1),
        }
    store.close()
    return result
