"""The main job on the local stack: a synthetic social network through the whole pipeline.

It builds a Zipf-like follower graph (user ``u0`` is the celebrity), runs the graph consumer,
publishes posts, runs the fan-out consumer, prints timelines and the figures, and checks every
timeline against the edge store. It runs in a sandbox (its own topics, cache namespace and
edge-store file) and leaves the machine as it found it.
"""

from __future__ import annotations

import random
import statistics
import threading
from collections.abc import Iterable, Iterator

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from timeline_fanout.cli import wiring
from timeline_fanout.cli.sandbox import sandbox
from timeline_fanout.cli.settings import Settings
from timeline_fanout.consumers import LoopStats
from timeline_fanout.consumers.fanout_apply import FanoutStats
from timeline_fanout.graph import ListKind, ListRef
from timeline_fanout.graph.timelines.reader import TimelineEntry
from timeline_fanout.schemas import AnyEvent, Follow, Post, Unfollow


def zipf_weights(users: int) -> list[float]:
    return [1 / (rank + 1) ** 1.1 for rank in range(users)]


def synthetic_graph(users: int, events: int, seed: int = 7) -> Iterator[Follow | Unfollow]:
    """Follows whose followees are Zipf-distributed, with unfollows and re-follows mixed in the
    way real churn looks."""
    rng = random.Random(seed)
    weights = zipf_weights(users)
    edges: list[tuple[str, str]] = []
    for _ in range(events):
        if edges and rng.random() < 0.2:
            follower, followee = edges.pop(rng.randrange(len(edges)))
            yield Unfollow(type="unfollow", follower=follower, followee=followee)
            continue
        followee = f"u{rng.choices(range(users), weights)[0]}"
        follower = f"u{rng.randrange(users)}"
        if follower != followee:
            edges.append((follower, followee))
            yield Follow(type="follow", follower=follower, followee=followee)


def synthetic_posts(users: int, posts: int, seed: int = 8) -> Iterator[Post]:
    """Popular users post more, as they do."""
    rng = random.Random(seed)
    weights = zipf_weights(users)
    for i in range(posts):
        author = f"u{rng.choices(range(users), weights)[0]}"
        yield Post(type="post", author=author, post_id=f"p{i}", text=f"post {i} by {author}")


def run_demo(settings: Settings, users: int, events: int, posts: int, console: Console) -> int:
    # Scaled to the demo's size so that both big-author paths run.
    scaled = {"chunk_size": max(users // 8, 10), "celebrity_threshold": max(users // 2, 20)}
    with sandbox(settings, "demo", **scaled) as demo:
        return _run(demo, users, events, posts, console)


def _publish(
    demo: Settings, events: Iterable[AnyEvent], total: int, what: str, console: Console
) -> None:
    with Progress(console=console, disable=not console.is_terminal) as progress:
        task = progress.add_task(f"publishing {what}", total=total)
        with wiring.publisher(demo) as publisher:
            for event in events:
                publisher.publish(event)
                progress.advance(task)


def _run(demo: Settings, users: int, events: int, posts: int, console: Console) -> int:
    console.print(
        f"[bold]timeline-fanout demo[/bold]: {users} users, {events} graph events, {posts} posts; "
        f"chunks of {demo.chunk_size} followers, celebrities above {demo.celebrity_threshold}"
    )
    graph = list(synthetic_graph(users, events))
    _publish(demo, graph, len(graph), "graph events", console)
    with console.status("graph consumer: applying (exits 3 s after the last event)"):
        graph_loop = wiring.graph_loop(demo, threading.Event())
        graph_stats = graph_loop.run(until_idle=3.0)
        graph_loop.source.close()
    console.print(
        f"graph consumer: {graph_stats.applied} events in {graph_stats.batches} batches, "
        f"{graph_stats.applied / max(graph_stats.busy_s, 1e-6):,.0f} events/s"
    )

    # The active users (half of them, as in an app) read their timelines before the posts:
    # those timelines are cached and get deliveries; the others are skipped and regenerated
    # from the store when first read.
    store = wiring.edge_store(demo)
    reader = wiring.timeline_reader(demo, store)
    active = [f"u{i}" for i in range(0, users, 2)]
    for start in range(0, len(active), 500):
        reader.timelines.read_many(
            [ListRef(ListKind.TIMELINE, u) for u in active[start : start + 500]]
        )
    store.close()

    # The fan-out consumer joins its group first, so the latency below is publish-to-delivery
    # and not the group join.
    joined = threading.Event()
    results: list[tuple[LoopStats, FanoutStats]] = []

    def fanout_consumer() -> None:
        loop = wiring.fanout_loop(demo, threading.Event())
        loop.source.await_assignment()
        joined.set()
        results.append((loop.run(until_idle=3.0), loop.applier.stats))  # type: ignore[attr-defined]
        loop.source.close()

    consumer = threading.Thread(target=fanout_consumer, daemon=True)
    with console.status("fan-out consumer: joining its group"):
        consumer.start()
        joined.wait()
    _publish(demo, synthetic_posts(users, posts), posts, "posts", console)
    with console.status("fan-out consumer: delivering (exits 3 s after the last post)"):
        consumer.join()
    fanout_stats, delivery = results[0]
    latencies = sorted(delivery.latencies_ms) or [0]
    console.print(
        f"fan-out consumer: {delivery.posts} posts, {delivery.deliveries} deliveries appended "
        f"to cached timelines ({delivery.deliveries / max(fanout_stats.busy_s, 1e-6):,.0f}/s), "
        f"{delivery.skipped} skipped (timeline not cached: regenerated on read), "
        f"{delivery.chunks_published} chunk tasks, {delivery.celebrity_posts} celebrity posts "
        f"merged at read time; publish-to-delivery latency p50 "
        f"{statistics.median(latencies):,.0f} ms, p99 {latencies[int(len(latencies) * 0.99)]:,} ms"
    )
    return _report(demo, users, console)


def _report(demo: Settings, users: int, console: Console) -> int:
    store = wiring.edge_store(demo)
    reader = wiring.timeline_reader(demo, store)
    follow_lists = wiring.list_store(demo, store)
    all_users = [f"u{i}" for i in range(users)]
    followers = follow_lists.read_many([ListRef(ListKind.FOLLOWERS, u) for u in all_users])
    table = Table(title="most followed")
    for column in ("user", "followers", "celebrity"):
        table.add_column(column)
    celebrities = store.celebrities()
    top = sorted(all_users, key=lambda u: -len(followers[ListRef(ListKind.FOLLOWERS, u)]))[:5]
    for user in top:
        count = len(followers[ListRef(ListKind.FOLLOWERS, user)])
        table.add_row(user, str(count), "yes" if user in celebrities else "")
    console.print(table)

    mismatched = 0
    for user in all_users:
        followees = store.all_members(ListRef(ListKind.FOLLOWING, user))
        expected = [TimelineEntry.of(p) for p in store.recent_posts(followees, demo.timeline_max)]
        mismatched += reader.read(user, limit=demo.timeline_max) != expected
    for user in ("u5", "u50", f"u{users - 1}"):
        entries = reader.read(user, limit=5)
        lines = "\n".join(f"  {e.post_id:<8} by {e.author}" for e in entries) or "  (empty)"
        console.print(f"timeline of {user}, newest first:\n{lines}")
    console.print(f"timelines checked against the edge store: {users}, mismatched: {mismatched}")
    store.close()
    return 0 if mismatched == 0 else 1
