"""A blocking timeline reader and the event loop's warm reads over one stack, for tests that
compare them (tests/graph/test_warm_reads*.py), and the memcached counters that show a read
wrote nothing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from pymemcache.client.base import Client

from tests.graph.lists.contention import write
from timeline_fanout.cli import wiring
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph import EdgeChange, ListKind, ListRef
from timeline_fanout.graph.lists.token_lists import Delivery
from timeline_fanout.graph.lists.tokens import token
from timeline_fanout.graph.model.edges import PostRecord, PostRef
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore
from timeline_fanout.graph.timelines.fetch import ReadMemory
from timeline_fanout.graph.timelines.reader import TimelineEntry, TimelinePage, TimelineReader
from timeline_fanout.graph.timelines.warm_reads import WarmReads
from timeline_fanout.memcache.async_cluster import AsyncMemcache
from timeline_fanout.memcache.cluster import Item, MemcacheCluster

MEMO_BYTES = 1 << 20
Runner = Callable[[Coroutine[Any, Any, TimelinePage | None]], TimelinePage | None]
# What a memcached server counts of writes: unchanged across a read that wrote nothing.
WRITE_STATS = (
    b"cmd_set",  # set, add, append, cas (stored or not)
    b"delete_hits",
    b"delete_misses",
    b"incr_hits",
    b"incr_misses",
    b"decr_hits",
    b"decr_misses",
    b"touch_hits",
    b"touch_misses",
    b"cmd_flush",
)


@dataclass
class Pair:
    """A blocking reader and the event loop's warm reads, sharing one ``ReadMemory`` as in
    ``fanout serve``, over one edge store and the fixture stack's memcached."""

    settings: Settings
    store: SqliteEdgeStore
    memory: ReadMemory
    blocking: TimelineReader
    warm_reads: WarmReads
    memo_reads: WarmReads  # the same, with a page memo (graph/timelines/page_memo.py)
    multi_gets: list[list[bytes]]
    pos: int = 0
    now: int = field(default_factory=lambda: int(time.time() * 1000))

    # -- the graph, written as the consumers write it --------------------------------------

    def follow(self, follower: str, *followees: str, active: bool = True) -> None:
        self.pos += 1
        changes = [EdgeChange(follower, f, active, self.pos) for f in followees]
        write(self.store, self.blocking.follow_lists, changes)

    def post(self, author: str, post_id: str, followers: list[str], ago_ms: int = 0) -> None:
        """The fan-out of an ordinary author's post: the store, then the timelines."""
        entry = TimelineEntry(self.now - ago_ms, author, post_id)
        self.blocking.bodies.store([PostRecord(author, post_id, entry.ts)])
        self.blocking.timelines.deliver([Delivery(token(True, entry.member), followers)])

    def celebrity_post(self, author: str, post_id: str, ago_ms: int = 0) -> None:
        """The fan-out of a celebrity's post: the store, the mark, the cached items."""
        self.blocking.bodies.store([PostRecord(author, post_id, self.now - ago_ms)])
        self.store.add_celebrities([author])
        self.blocking.celebrity_posts.refresh([author])

    def delete(self, author: str, post_id: str) -> None:
        """The fan-out's deletion: the store's tombstone, then the post's body item and the
        deletion mark (a celebrity's cached posts are left as they were: a late refresh)."""
        ref = PostRef(author, post_id)
        self.store.delete_posts([ref])
        self.blocking.bodies.delete([ref])

    # -- keys --------------------------------------------------------------------------------

    def following_key(self, user: str) -> bytes:
        return self.blocking.follow_lists.index_key(ListRef(ListKind.FOLLOWING, user))

    def timeline_key(self, user: str) -> bytes:
        return self.blocking.timelines.index_key(ListRef(ListKind.TIMELINE, user))

    # -- reads -------------------------------------------------------------------------------

    def warm(
        self, user: str, limit: int = 50, cursor: str | None = None, run: Runner = asyncio.run
    ) -> TimelinePage | None:
        """One warm read on a loop of its own (its connections closed on that loop); the
        multi-GETs it made are in ``multi_gets``."""
        self.multi_gets.clear()

        async def once() -> TimelinePage | None:
            try:
                return await self.warm_reads.page(user, limit, cursor)
            finally:
                self.warm_reads.close()

        return run(once())

    def rendered(self, user: str, limit: int = 50, cursor: str | None = None) -> bytes | None:
        """One read through the page memo (``shown`` as the renderer), on a loop of its own."""

        async def once() -> bytes | None:
            try:
                return await self.memo_reads.rendered(user, limit, cursor, shown)
            finally:
                self.memo_reads.close()

        return asyncio.run(once())

    def both(self, user: str, limit: int = 50, cursor: str | None = None) -> TimelinePage | None:
        """The warm read and the read through the page memo, then the blocking read with the
        same arguments: the warm page (None or the blocking one, asserted; the memo's, None or
        the blocking one rendered)."""
        warm = self.warm(user, limit, cursor)
        body = self.rendered(user, limit, cursor)
        blocking = self.blocking.page(user, limit, cursor)
        assert warm is None or warm == blocking
        assert body is None or body == shown(blocking)
        return warm

    def close(self) -> None:
        self.blocking.follow_lists.cache.close()
        self.store.close()


def count_multi_gets(monkeypatch: pytest.MonkeyPatch) -> list[list[bytes]]:
    """The keys of every ``AsyncMemcache.gets_many`` call from now on, in order (the real call
    is made: instrumentation, not a mock)."""
    calls: list[list[bytes]] = []
    original = AsyncMemcache.gets_many

    async def counted(self: AsyncMemcache, keys: list[bytes]) -> dict[bytes, Item]:
        calls.append(list(keys))
        return await original(self, keys)

    monkeypatch.setattr(AsyncMemcache, "gets_many", counted)
    return calls


def make_pair(settings: Settings, multi_gets: list[list[bytes]]) -> Pair:
    store = cast(SqliteEdgeStore, wiring.edge_store(settings))
    memory = ReadMemory()
    blocking = wiring.timeline_reader(settings, store, memory)
    # The loop's plans come from a reader over the blocking one's connections, as a request
    # thread lends it in ``fanout serve`` (graph/timelines/warm_reads.py).
    plans = wiring.timeline_reader(settings, store, memory, blocking.timelines.cache)
    trust = cast(MemcacheCluster, blocking.timelines.cache).trust  # shared, as in the API
    warm_reads = wiring.warm_reads(settings, trust, plans=plans)
    memo_reads = wiring.warm_reads(settings, trust, MEMO_BYTES, plans=plans)
    return Pair(settings, store, memory, blocking, warm_reads, memo_reads, multi_gets)


def shown(page: TimelinePage) -> bytes | None:
    """A renderer for the page memo: any deterministic bytes of the page will do."""
    return repr(page).encode() if page.entries else None


def writes(settings: Settings) -> list[int]:
    """Every server's write counters (``WRITE_STATS``)."""
    counts: list[int] = []
    for address in settings.memcached_servers:
        client = Client(address, connect_timeout=2, timeout=2)
        try:
            stats = client.stats()
        finally:
            client.close()
        counts += [int(stats[name]) for name in WRITE_STATS]
    return counts
