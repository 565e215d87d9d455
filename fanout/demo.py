"""The main job on the local stack: a synthetic social graph through the real pipeline.

It runs under its own topic prefix, cache namespace and edge-store file, and takes the stack down
again only if it had to bring it up, so it leaves the machine as it found it.
"""

from __future__ import annotations

import random
import secrets
import threading
import time
from collections.abc import Iterator

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from fanout import stack, wiring
from fanout.settings import Settings, fanout_home, stack_file
from graph import ListKind, ListRef
from producers import create_topics
from schemas import Follow, Unfollow


def synthetic_graph(users: int, events: int, seed: int = 7) -> Iterator[Follow | Unfollow]:
    """Follows whose followees are Zipf-distributed (user 0 is the celebrity), with unfollows
    and re-follows mixed in the way real churn looks."""
    rng = random.Random(seed)
    weights = [1 / (rank + 1) ** 1.1 for rank in range(users)]
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


def run_demo(settings: Settings, users: int, events: int, console: Console) -> int:
    was_up = bool(stack.stack_status(stack.StackState.load(stack_file())))
    state = stack.stack_up(settings.topics, settings.partitions)
    run = secrets.token_hex(3)
    db = fanout_home() / f"demo-{run}.db"
    demo = settings.model_copy(
        update={
            "kafka": state.kafka,
            "memcached": state.memcached,
            "topic_prefix": f"demo{run}",
            "cache_prefix": f"demo{run}",
            "edge_store": f"sqlite:///{db}",
            "group": f"demo{run}",
        }
    )
    try:
        # Kafka clients live only inside _run, so they are gone before the stack goes down.
        return _run(demo, users, events, console)
    finally:
        db.unlink(missing_ok=True)
        for suffix in ("-wal", "-shm"):
            db.with_name(db.name + suffix).unlink(missing_ok=True)
        if not was_up:
            stack.stack_down()


def _run(demo: Settings, users: int, events: int, console: Console) -> int:
    create_topics(demo.kafka, demo.topics.all(), demo.partitions)
    graph = list(synthetic_graph(users, events))
    started = time.monotonic()
    with Progress(console=console, disable=not console.is_terminal) as progress:
        task = progress.add_task("publishing graph events", total=len(graph))
        with wiring.publisher(demo) as publisher:
            for event in graph:
                publisher.publish(event)
                progress.advance(task)
    published_s = time.monotonic() - started
    console.print(
        f"published {len(graph)} events in {published_s:.2f}s "
        f"({len(graph) / published_s:,.0f} events/s)"
    )

    started = time.monotonic()
    loop = wiring.graph_loop(demo, threading.Event())
    try:
        stats = loop.run(until_idle=3.0)
    finally:
        loop.source.close()
    consumed_s = time.monotonic() - started - 3.0
    console.print(
        f"graph consumer applied {stats.applied} events in {stats.batches} batches "
        f"({stats.applied / max(consumed_s, 1e-3):,.0f} events/s incl. group join)"
    )

    store = wiring.edge_store(demo)
    lists = wiring.list_store(demo, store)
    all_users = [f"u{i}" for i in range(users)]
    refs = [ListRef(kind, u) for u in all_users for kind in ListKind]
    cached = lists.read_many(refs)
    wrong = [r for r in refs if cached[r] != frozenset(store.all_members(r))]
    table = Table(title="most followed")
    for column in ("user", "followers", "following", "sample followers"):
        table.add_column(column)
    top = sorted(all_users, key=lambda u: -len(cached[ListRef(ListKind.FOLLOWERS, u)]))[:5]
    for user in top:
        followers = sorted(cached[ListRef(ListKind.FOLLOWERS, user)])
        following = cached[ListRef(ListKind.FOLLOWING, user)]
        table.add_row(
            user,
            str(len(followers)),
            str(len(following)),
            " ".join(followers[:6]) + (" ..." if len(followers) > 6 else ""),
        )
    console.print(table)
    console.print(f"lists checked against the edge store: {len(refs)}, mismatched: {len(wrong)}")
    store.close()
    return 0 if not wrong else 1
