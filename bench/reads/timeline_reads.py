"""5. Timeline reads: p50/p99 of a first page (50 entries, each post with a text of ``TEXT_LEN``
characters) for ordinary users and for users who follow a celebrity (merged at read time), next
to a plain GET of one value as large as the timeline item plus 50 entries, through the same
client.

The machine is shared and its speed drifts by 2x within seconds, so reads and GETs are timed in
alternating blocks (20 reads, one per user, then 20 GETs), and the ratio rows state the goal
each ratio is held to (p50 <= 3x a plain GET, <= 5x for celebrity followers). A page is read
twice per user and block: with its texts known (graph/timelines/known_texts.py), as a warm
reader's pages are, and by a reader that knows no text, so that its page reads its 50 bodies
in a second multi-GET, as a page read right after a deletion does (<= 4x; <= 5x for celebrity
followers).
Also counted: edge-store queries per read (none when warm).

The same users are then read the way ``fanout serve`` reads them: on an event loop
(graph/timelines/warm_reads.py), with and without the page memo (graph/timelines/page_memo.py),
next to a plain GET
through the loop's own client (memcache/async_cluster.py), in alternating blocks too.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, cast

import uvloop

from bench.support.report import Report, Row, percentiles, timed
from timeline_fanout.api.routes.timelines import shown
from timeline_fanout.cli import wiring
from timeline_fanout.cli.sandbox import sandbox
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph import ListKind, ListRef
from timeline_fanout.graph.timelines.fetch import ReadMemory
from timeline_fanout.graph.timelines.known_texts import KnownTexts
from timeline_fanout.graph.timelines.reader import TimelineReader
from timeline_fanout.memcache.async_cluster import AsyncMemcache
from timeline_fanout.memcache.cluster import MemcacheCluster

USERS = 300
BLOCK = 20  # reads (one per user) or GETs per block
TEXT_LEN = 140  # each post's text, read with the page (graph/timelines/post_bodies.py)
GOALS = {"ordinary": 3.0, "celebrity_follower": 5.0}  # read p50 / plain GET p50, at most
GOALS |= {f"{kind} (event loop)": goal for kind, goal in GOALS.items()}
FETCHED_GOALS = {"ordinary": 4.0, "celebrity_follower": 5.0}  # a page that reads its bodies
READS = (("timeline read", "over_plain_get"), ("memo read", "memo_over_plain_get"))


def run(settings: Settings, report: Report) -> None:
    posts = 500 if report.quick else 5_000
    # The celebrity has USERS // 2 followers: above the threshold, so it is never fanned out.
    with sandbox(settings, "btl", celebrity_threshold=USERS // 2 - 1) as s:
        rows = _measure(s, posts, 2 if report.quick else 40)
    bars = []
    for kind, row in rows.items():
        report.add(readers=kind, **row)
        bars += [(f"{kind} timeline", row["p50_ms"]), (f"{kind} plain GET", row["get_p50_ms"])]
    for kind, row in rows.items():
        for read, column in READS:
            if column in row:
                report.add(
                    ratio=f"{kind} {read} p50 / plain GET p50",
                    value=row[column],
                    goal_at_most=GOALS[kind],
                    met=row[column] <= GOALS[kind],
                )
        if "fetched_over_plain_get" in row:
            goal = FETCHED_GOALS[kind]
            value = row["fetched_over_plain_get"]
            report.add(
                ratio=f"{kind} read with its texts fetched p50 / plain GET p50",
                value=value,
                goal_at_most=goal,
                met=value <= goal,
            )
    report.write(bars, "p50 latency (ms)")


def _populate(s: Settings, posts: int) -> None:
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
            text = "".join(rng.choices("abcdefghij klmnopqrst uvwxyz", k=TEXT_LEN))
            publisher.publish({"type": "post", "author": author, "post_id": f"p{k}", "text": text})
    loop = wiring.fanout_loop(s, threading.Event())
    loop.run(until_idle=2.0)
    loop.source.close()


class _Forgetful(KnownTexts):
    """Knows no text: every page this reader reads multi-GETs its bodies."""

    def remember(self, texts: dict[bytes, str | None], mark: bytes, until: float) -> None:
        return None


class _Counted:
    """The edge store with a count of calls by method: a warm read must make none."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return value(*args, **kwargs)

        return call


def _measure(s: Settings, posts: int, rounds: int) -> dict[str, Row]:
    _populate(s, posts)
    raw_store = wiring.edge_store(s)
    store = _Counted(raw_store)
    reader = wiring.timeline_reader(s, store)
    cache = reader.timelines.cache
    fetching = wiring.timeline_reader(s, store, cache=cache, known=_Forgetful())
    result = {}
    for kind, users in (
        ("ordinary", range(0, USERS, 2)),
        ("celebrity_follower", range(1, USERS, 2)),
    ):
        picks = [f"u{u}" for u in list(users)[:BLOCK]]
        for user in picks:
            reader.read(user)  # materialise: measure steady state, not regeneration
            fetching.read(user)
        tl_key = reader.timelines.index_key(ListRef(ListKind.TIMELINE, picks[0]))
        size = sum(len(v) for v in cache.get_many([tl_key]).values()) + 50 * 40
        cache.set_many({b"plainget": b"x" * size})
        assert kind == "ordinary" or "celeb" in raw_store.celebrities(), "not a celebrity"
        store.calls.clear()
        reads, fetched, gets = _alternating(
            [lambda u: reader.read(u, limit=50), lambda u: fetching.read(u, limit=50)],
            lambda: cache.get_many([b"plainget"]),
            picks,
            rounds,
        )
        row = percentiles(reads)
        with_fetches = percentiles(fetched)
        plain = percentiles(gets)
        count = len(reads) + len(fetched)
        result[kind] = {
            **row,
            "fetched_p50_ms": with_fetches["p50_ms"],
            "fetched_p99_ms": with_fetches["p99_ms"],
            "get_p50_ms": plain["p50_ms"],
            "get_p99_ms": plain["p99_ms"],
            "over_plain_get": round(row["p50_ms"] / plain["p50_ms"], 1),
            "fetched_over_plain_get": round(with_fetches["p50_ms"] / plain["p50_ms"], 1),
            "timeline_bytes": size - 50 * 40,
            "store_queries_per_read": round(sum(store.calls.values()) / count, 2),
        }
        result[f"{kind} (event loop)"] = uvloop.run(_on_the_loop(s, reader, store, picks, rounds))
    raw_store.close()
    return result


async def _on_the_loop(
    s: Settings, fallback: TimelineReader, store: _Counted, picks: list[str], rounds: int
) -> Row:
    """The API's read (graph/timelines/warm_reads.py) on an event loop, with and without the page
    memo, next to a plain GET of the same bytes through the loop's own client, in alternating
    blocks. The loop's plans come from a reader over the fallback's connections, as a request
    thread lends it in ``fanout serve``."""
    plans = wiring.timeline_reader(s, store, ReadMemory(), fallback.timelines.cache)
    trust = cast(MemcacheCluster, fallback.timelines.cache).trust  # shared, as in the API
    warm = wiring.warm_reads(s, trust, plans=plans)
    memo = wiring.warm_reads(s, trust, 64 << 20, plans=plans)
    plain = AsyncMemcache(s.memcached_servers)
    samples: dict[str, list[float]] = {"read": [], "memo": [], "get": []}
    fallbacks = [0]

    async def timed_block(what: str, call: Callable[[str], Awaitable[object]]) -> None:
        for user in picks:
            started = time.perf_counter()
            await call(user)
            samples[what].append(time.perf_counter() - started)

    async def read(user: str) -> None:
        if await warm.page(user, 50, None) is None:
            blocking(user)

    async def memo_read(user: str) -> None:
        if await memo.rendered(user, 50, None, shown) is None:
            blocking(user)

    def blocking(user: str) -> None:
        """What the API does when a read is not warm (the celebrity items expire every few
        seconds, and the first reader after that rebuilds them from the store)."""
        fallbacks[0] += 1
        fallback.page(user, 50)

    async def get(_user: str) -> None:
        await plain.gets_many([b"plainget"])

    try:
        for _ in range(2):  # remember every user, then fill the memo
            for user in picks:
                await warm.page(user, 50, None)
                await memo.rendered(user, 50, None, shown)
        for _ in range(rounds):
            await timed_block("read", read)
            await timed_block("memo", memo_read)
            await timed_block("get", get)
    finally:
        for closing in (warm, memo, plain):
            closing.close()
    got = {what: percentiles(taken) for what, taken in samples.items()}
    return {
        **got["read"],
        "memo_p50_ms": got["memo"]["p50_ms"],
        "memo_p99_ms": got["memo"]["p99_ms"],
        "get_p50_ms": got["get"]["p50_ms"],
        "get_p99_ms": got["get"]["p99_ms"],
        "over_plain_get": round(got["read"]["p50_ms"] / got["get"]["p50_ms"], 1),
        "memo_over_plain_get": round(got["memo"]["p50_ms"] / got["get"]["p50_ms"], 1),
        "not_warm": fallbacks[0],
    }


def _alternating(
    reads: list[Callable[[str], object]],
    get: Callable[[], object],
    users: list[str],
    rounds: int,
) -> tuple[list[float], ...]:
    """Samples of each of ``reads`` (one per user per round) and of ``get`` (as many), in
    alternating blocks, so that all see the same moments of a noisy machine: one list per read,
    then the GETs'."""
    samples: list[list[float]] = [[] for _ in [*reads, get]]
    for _ in range(rounds):
        for read, taken in zip(reads, samples, strict=False):
            for user in users:
                taken += timed(lambda user=user, read=read: read(user), 1)
        samples[-1] += timed(get, len(users))
    assert statistics.median(samples[-1]) > 0
    return tuple(samples)
