"""Many writers on one hot list while readers compact it: shared by the list tests and the
fault suite (which runs it bigger and reports figures)."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from pathlib import Path

from tests.held_ring import own_trust
from timeline_fanout.graph import (
    EdgeChange,
    ListKind,
    ListRef,
    ListSettings,
    ShardedLists,
)
from timeline_fanout.graph.lists.sharded import ShardedLayout
from timeline_fanout.graph.lists.token_lists import ListStats, TokenLists
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore
from timeline_fanout.memcache.cluster import MemcacheCluster

STAR = ListRef(ListKind.FOLLOWERS, "star")


def write(store: SqliteEdgeStore, lists: ShardedLists, changes: list[EdgeChange]) -> None:
    """What the graph consumer does: the store first, then positioned tokens for the changes
    the store did not refuse."""
    live = store.apply(changes)
    tokens: dict[ListRef, list[tuple[bool, str, int]]] = {}
    for c in live:
        tokens.setdefault(ListRef(ListKind.FOLLOWERS, c.followee), []).append(
            (c.active, c.follower, c.pos)
        )
        tokens.setdefault(ListRef(ListKind.FOLLOWING, c.follower), []).append(
            (c.active, c.followee, c.pos)
        )
    lists.apply(tokens)


@dataclass
class Contention:
    expected: set[str]
    cached: frozenset[str]
    stored: set[str]
    stats: list[ListStats]
    errors: list[BaseException]


def contend(
    servers: list[tuple[str, int]],
    db: Path,
    settings: ListSettings,
    writers: int = 8,
    readers: int = 4,
    steps: int = 60,
) -> Contention:
    """Writers own disjoint members (as partitions do) and flip them on and off; readers read
    (and so compact) the list all the while."""
    SqliteEdgeStore(db).close()
    final: dict[str, bool] = {}
    errors: list[BaseException] = []
    stop = threading.Event()
    stats: list[ListStats] = []

    def writer(w: int) -> None:
        try:
            store = SqliteEdgeStore(db)
            lists = TokenLists(
                ShardedLayout,
                product_cache(servers),
                store,
                settings,
                rng=random.Random(w),
            )
            rng = random.Random(w)
            for step in range(steps):
                member = f"w{w}m{rng.randrange(6)}"
                active = rng.random() < 0.6
                write(store, lists, [EdgeChange(member, "star", active, step * 100 + w)])
                final[member] = active
            stats.append(lists.stats)
        except BaseException as exc:
            errors.append(exc)

    def reader() -> None:
        try:
            lists = TokenLists(
                ShardedLayout,
                product_cache(servers),
                SqliteEdgeStore(db),
                settings,
            )
            while not stop.is_set():
                lists.read(STAR)
            stats.append(lists.stats)
        except BaseException as exc:
            errors.append(exc)

    reading = [threading.Thread(target=reader) for _ in range(readers)]
    writing = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    for t in reading + writing:
        t.start()
    for t in writing:
        t.join()
    stop.set()
    for t in reading:
        t.join()
    check = TokenLists(
        ShardedLayout,
        product_cache(servers),
        SqliteEdgeStore(db),
        settings,
    )
    return Contention(
        {m for m, on in final.items() if on},
        check.read(STAR),
        set(SqliteEdgeStore(db).followers("star")),
        stats,
        errors,
    )


def product_cache(servers: list[tuple[str, int]]) -> MemcacheCluster:
    """A client of ``servers`` as a process of the product makes it (its own record)."""
    return MemcacheCluster(servers, trust=own_trust(servers))
