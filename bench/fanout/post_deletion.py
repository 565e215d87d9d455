"""10. Deleting a post: an author with N followers (100k; ordinary, fanned out) posts, then
deletes the post. Measured from publish: until a follower's page (read over and over) stops
showing it, and the bytes the consumer sent to memcached for a deletion (the servers'
``bytes_read``, over a second deletion with no reader polling), next to the post's own fan-out
in the same run (publish to last delivery, bytes). Then what deletions cost a warm
timeline read: first pages of 50 from timelines of 400 posts with none deleted and with every
tenth deleted (10% of the posts, all through the page), and the first of them read each time
right after a deletion of some other post (which changes the deletion mark, so the page reads
its texts again: graph/timelines/post_bodies.py), read in alternation.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable

from pymemcache.client.base import Client

from bench.support.graph_builder import build_followers
from bench.support.report import Report, Row
from timeline_fanout.cli import gc_policy, wiring
from timeline_fanout.cli.sandbox import sandbox
from timeline_fanout.cli.settings import Settings
from timeline_fanout.consumers.graph_apply import GraphApplier
from timeline_fanout.consumers.loop import BatchReport
from timeline_fanout.graph import ListKind, ListRef
from timeline_fanout.graph.model.edges import EdgeChange, PostRecord, PostRef
from timeline_fanout.graph.timelines.reader import TimelineReader

SIZES = [100_000]
QUICK = [2_000]
AUTHORS = 20
POSTS_EACH = 20
READS = 3_000


def run(settings: Settings, report: Report) -> None:
    gc_policy.tune_for_consuming()
    bars: list[tuple[str, float]] = []
    for n in QUICK if report.quick else SIZES:
        with sandbox(settings, "bdel", celebrity_threshold=10 * n) as s:
            row = _one(s, n)
            row.update(_read_cost(s, 300 if report.quick else READS))
        report.add(**row)
        bars += [
            (f"{n:,} post fan-out", row["post_publish_to_last_delivery_s"] * 1000),
            (f"{n:,} deletion", row["delete_publish_to_gone_s"] * 1000),
        ]
    report.write(bars, "ms from publish")


def _bytes_read(servers: list[tuple[str, int]]) -> int:
    """What every server has read from its clients so far (memcached's ``stats``)."""
    total = 0
    for server in servers:
        client = Client(server)
        total += int(client.stats()[b"bytes_read"])
        client.close()
    return total


def _one(s: Settings, n: int) -> Row:
    store = wiring.edge_store(s)
    follow_lists = wiring.list_store(s, store)
    follow_lists.read(ListRef(ListKind.FOLLOWERS, "author"))
    build_followers(GraphApplier(store, follow_lists), "author", n)
    timelines = wiring.timeline_store(s, store, follow_lists.cache)
    refs = [ListRef(ListKind.TIMELINE, f"f{i}") for i in range(n)]
    for i in range(0, n, 10_000):
        timelines.rebuild_many(refs[i : i + 10_000])
    reader = wiring.timeline_reader(s, store)
    servers = list(s.memcached_servers)

    joined = threading.Event()
    applied: dict[str, float] = {}
    stop = threading.Event()

    def consumer() -> None:
        loop = wiring.fanout_loop(s, stop)
        stats = loop.applier.stats  # type: ignore[attr-defined]

        def observe(_report: BatchReport) -> None:
            if stats.deliveries >= n and "post" not in applied:
                applied["post"] = time.perf_counter()
            applied["deleted"] = stats.deleted

        loop.observers.append(observe)
        loop.source.await_assignment()
        joined.set()
        loop.run()
        loop.source.close()

    thread = threading.Thread(target=consumer, daemon=True)
    thread.start()
    joined.wait(120)
    with wiring.publisher(s) as publisher:
        publisher.publish({"type": "post", "author": "nobody", "post_id": "warm-up"})
        publisher.flush()

        def timed(event: dict[str, str], done: Callable[[], bool]) -> tuple[float, int]:
            before = _bytes_read(servers)
            published = time.perf_counter()
            publisher.publish(event)
            publisher.flush()
            while not done():
                time.sleep(0.0005)
            return time.perf_counter() - published, _bytes_read(servers) - before

        post_s, post_bytes = timed(
            {"type": "post", "author": "author", "post_id": "p1", "text": "x" * 140},
            lambda: "post" in applied,
        )
        shown = [e.post_id for e in reader.page(f"f{n - 1}", 50).entries]
        assert shown == ["p1"], shown
        gone_s, _ = timed(  # a follower's page read until it no longer shows the post
            {"type": "post_deleted", "author": "author", "post_id": "p1"},
            lambda: not reader.page(f"f{n - 1}", 50).entries,
        )
        _, delete_bytes = timed(  # bytes: a second deletion, with no reader polling meanwhile
            {"type": "post_deleted", "author": "author", "post_id": "p0"},
            lambda: applied.get("deleted", 0) >= 2,
        )
    stop.set()
    thread.join(60)
    sample = [f"f{i}" for i in range(0, n, max(1, n // 200))]
    assert all(not reader.page(u, 50).entries for u in sample)  # no follower shows it
    store.close()
    return {
        "followers": n,
        "post_publish_to_last_delivery_s": round(post_s, 3),
        "post_bytes_to_memcached": post_bytes,
        "delete_publish_to_gone_s": round(gone_s, 4),
        "delete_bytes_to_memcached": delete_bytes,
    }


def _read_cost(s: Settings, reads: int) -> Row:
    """First pages of 50 of two users with the same timelines but for deletions, warm (each
    read once before), and the first user's right after a deletion elsewhere: p50 over
    ``reads`` reads each in alternation."""
    store = wiring.edge_store(s)
    reader = wiring.timeline_reader(s, store)
    now = int(time.time() * 1000)
    changes: list[EdgeChange] = []
    posts: list[PostRecord] = []
    for side in ("plain", "holey"):
        for k in range(AUTHORS):
            changes.append(EdgeChange(side, f"{side}{k}", True, len(changes) + 1))
            posts += [
                PostRecord(f"{side}{k}", f"q{i}", now - 1000 * (i * AUTHORS + k), "t" * 140)
                for i in range(POSTS_EACH)
            ]
    store.apply(changes)
    reader.bodies.store(posts)
    holes = [
        PostRef(p.author, p.post_id)
        for i, p in enumerate(posts)
        if p.author[0] == "h" and i % 10 == 0
    ]
    store.delete_posts(holes)
    reader.bodies.delete(holes)
    for side in ("plain", "holey"):
        reader.page(side, 50)
        reader.page(side, 50)
    timings: dict[str, list[float]] = {"plain": [], "holey": [], "after": []}
    for n in range(reads):
        reader.bodies.delete([PostRef("elsewhere", f"z{n}")])
        timings["after"].append(_timed_page(reader, "plain"))
        reader.page("holey", 50)  # its texts known under the new mark too, as the first's now
        for side in ("plain", "holey"):
            timings[side].append(_timed_page(reader, side))
    assert len(reader.page("holey", 50).entries) == 50
    store.close()
    plain, holey, after = (statistics.median(timings[k]) for k in ("plain", "holey", "after"))
    return {
        "read_p50_ms_no_deletions": round(plain * 1000, 3),
        "read_p50_ms_10pct_deleted": round(holey * 1000, 3),
        "read_ratio": round(holey / plain, 2),
        "read_p50_ms_after_any_deletion": round(after * 1000, 3),
        "read_after_deletion_ratio": round(after / plain, 2),
    }


def _timed_page(reader: TimelineReader, user: str) -> float:
    started = time.perf_counter()
    reader.page(user, 50)
    return time.perf_counter() - started
