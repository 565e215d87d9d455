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
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from timeline_fanout.cli import wiring
from timeline_fanout.cli.sandbox import sandbox
from timeline_fanout.cli.settings import Settings
from timeline_fanout.consumers import ConsumeLoop, LoopStats
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

    # The fan-out consumer joins its group first, so the latencies below are publish-to-delivery
    # and not the group join; it runs until the burst is delivered and the idle probes are done.
    stop = threading.Event()
    joined = threading.Event()
    loops: list[ConsumeLoop] = []
    results: list[LoopStats] = []

    def fanout_consumer() -> None:
        try:  # the loop is made in its own thread: its SQLite edge store is used only there
            loops.append(wiring.fanout_loop(demo, stop))
            loops[0].source.await_assignment()
            joined.set()
            results.append(loops[0].run())
        finally:
            joined.set()
            if loops:
                loops[0].source.close()

    consumer = threading.Thread(target=fanout_consumer, daemon=True)
    with console.status("fan-out consumer: joining its group"):
        consumer.start()
        joined.wait()
    if not consumer.is_alive():
        raise RuntimeError("the fan-out consumer stopped before it joined its group")
    running = Running(consumer, loops[0].applier.stats)  # type: ignore[attr-defined]
    delivery = running.delivery
    _publish(demo, synthetic_posts(users, posts), posts, "posts", console)
    with console.status("fan-out consumer: delivering the burst"):
        running.await_applied(posts)
    burst = sorted(delivery.latencies_ms) or [0]
    with console.status("fan-out consumer: posts published one at a time into the idle pipeline"):
        idle = sorted(
            _idle_latencies_ms(demo, running, _probe_author(graph, users, demo.chunk_size))
        )
    stop.set()
    consumer.join()
    fanout_stats = results[0]
    console.print(
        f"fan-out consumer: {delivery.posts} posts, {delivery.deliveries} deliveries appended "
        f"to cached timelines ({delivery.deliveries / max(fanout_stats.busy_s, 1e-6):,.0f}/s), "
        f"{delivery.skipped} skipped (timeline not cached: regenerated on read), "
        f"{delivery.chunks_published} chunk tasks, {delivery.celebrity_posts} celebrity posts "
        f"merged at read time"
    )
    console.print(
        f"latency of a post published into the idle pipeline (publish to delivered): p50 "
        f"{statistics.median(idle):,.0f} ms, max {idle[-1]:,} ms over {len(idle)} posts"
    )
    console.print(
        f"the {posts:,} posts published in one burst, publish to delivered (mostly time queued "
        f"behind the burst): p50 {statistics.median(burst):,.0f} ms, "
        f"p99 {burst[int(len(burst) * 0.99)]:,} ms"
    )
    return _report(demo, users, console)


IDLE_PROBES = 5


@dataclass(frozen=True)
class Running:
    """The fan-out consumer running in ``thread``, watched from the demo's thread."""

    thread: threading.Thread
    delivery: FanoutStats

    def await_applied(self, posts: int) -> None:
        """Until ``posts`` posts were applied (a big author's chunk tasks may still be queued:
        the first probe after a burst can wait behind them, hence a median); an error if the
        consumer stopped."""
        while self.delivery.posts < posts:
            self._alive()

    def _alive(self) -> None:
        if not self.thread.is_alive():
            raise RuntimeError("the fan-out consumer stopped (its error is above)")
        time.sleep(0.01)  # polling counters the consumer's thread moves


def _probe_author(graph: list[Follow | Unfollow], users: int, chunk_size: int) -> str:
    """The author of the idle probes: the user with the most followers among the active ones
    (those of even number, whose timelines are cached) whose posts the consumer delivers
    itself: fewer followers than a chunk (a bigger author's are delivered through chunk tasks,
    a celebrity's merged at read time)."""
    followers: dict[str, set[str]] = {}
    for event in graph:
        group = followers.setdefault(event.followee, set())
        (group.add if isinstance(event, Follow) else group.discard)(event.follower)
    active = {f"u{i}" for i in range(0, users, 2)}
    ranked = sorted(followers, key=lambda u: -len(followers[u] & active))
    return next(
        (u for u in ranked if len(followers[u]) < chunk_size and followers[u] & active), "u0"
    )


def _idle_latencies_ms(demo: Settings, running: Running, author: str) -> list[int]:
    """Posts published one at a time, each once the one before was delivered: the latency a
    post sees when nothing queues ahead of it."""
    found: list[int] = []
    with wiring.publisher(demo) as publisher:
        for n in range(IDLE_PROBES):
            delivery = running.delivery
            applied, measured = delivery.posts, len(delivery.latencies_ms)
            publisher.publish(
                Post(type="post", author=author, post_id=f"idle{n}", text=f"idle post {n}")
            )
            publisher.flush()
            running.await_applied(applied + 1)
            if len(delivery.latencies_ms) > measured:  # delivered to a cached timeline
                found.append(delivery.latencies_ms[-1])
    return found or [0]


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
