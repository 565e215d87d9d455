"""Timeline pages while the cache ring moves (memcache/ring.py): a read whose items begin moving
between servers after it checked them answers from the store, and never fails."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

import pytest

from tests.held_ring import HeldRing
from timeline_fanout.graph.lists.capped import CappedLayout
from timeline_fanout.graph.lists.sharded import ShardedLayout
from timeline_fanout.graph.lists.token_lists import ListSettings, TokenLists
from timeline_fanout.graph.model.edges import EdgeChange, PostRecord, PostRef, StoredBodies
from timeline_fanout.graph.model.keys import KeySpace
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore
from timeline_fanout.graph.timelines.celebrity_posts import CelebrityPosts
from timeline_fanout.graph.timelines.reader import TimelineReader, TimelineSource
from timeline_fanout.memcache.cluster import MemcacheCluster
from timeline_fanout.memcache.ring import RingRecord, RingView
from timeline_fanout.memcache.trust import ServerTrust, TrustSettings
from timeline_fanout_devstack.memcached_processes import own_server

# A body moves to the added fourth server with a chance of about 1/4, whatever the ports and
# namespace: with 40 bodies, some move and some stay but once in ~10^5 runs (12 gave 1 in 30).
AUTHORS = [f"a{i}" for i in range(40)]
READER = "r0"
BOUNDS = TrustSettings(timeout_s=1.0, retry_s=2.0)


@pytest.fixture
def four() -> Iterator[list[str]]:
    with own_server() as a, own_server() as b, own_server() as c, own_server() as d:
        yield sorted(f"{h}:{p}" for _, (h, p) in (a, b, c, d))


class MovesOnBodies:
    """The edge store, through which the ring begins moving just as a page reads its post
    bodies from it: after the fill's ``~`` was ADDed, before its CAS (the process's lease on
    the record runs out then)."""

    def __init__(self, store: SqliteEdgeStore, source: HeldRing, target: list[str]) -> None:
        self.store, self.source, self.target = store, source, tuple(target)
        self.switch = lambda: None

    def post_bodies(self, posts: Collection[PostRef]) -> StoredBodies:
        record = self.source.record
        if record is not None and not record.moving:
            assert self.source.swap_ring(record, record.moved_to(self.target))
            self.switch()
        return self.store.post_bodies(posts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def test_a_page_whose_post_bodies_begin_moving_while_it_fills_them_is_answered_from_the_store(
    four: list[str], sqlite_store: SqliteEdgeStore, unique: str
) -> None:
    """Bodies moving to the added server cannot be filled (their CAS would land on a copy the
    processes still at the old version do not read): the fill is left undone, and the page
    shows every text from the store."""
    sqlite_store.apply([EdgeChange(READER, a, True, i + 1) for i, a in enumerate(AUTHORS)])
    posts = [PostRecord(a, f"p{i}", 1_000 + i, f"text {i}") for i, a in enumerate(AUTHORS)]
    sqlite_store.store_posts(posts)
    source = HeldRing(RingRecord.of(four[:3]))
    now = [0.0]
    view = RingView(
        RingRecord.of(four[:3]), source, 3600.0, clock=lambda: now[0], families=KeySpace.families
    )
    cache = MemcacheCluster(
        [(h, int(p)) for h, p in (s.rsplit(":", 1) for s in four)],
        trust=ServerTrust(four[:3], BOUNDS, ring=view),
    )
    cache.settle()
    store: Any = MovesOnBodies(sqlite_store, source, four)

    def switch() -> None:
        now[0] += 3600.0

    store.switch = switch
    lists = TokenLists(ShardedLayout, cache, store, ListSettings(namespace=unique))
    timelines = TokenLists(
        CappedLayout, cache, TimelineSource(store, 50), ListSettings(namespace=unique)
    )
    reader = TimelineReader(
        store, lists, timelines, 50, CelebrityPosts(cache, store, timelines.keys, 50, 5)
    )
    page = reader.page(READER)
    assert source.record is not None and source.record.moving  # the bodies were read mid-move
    expected = sorted(posts, key=lambda p: p.ts, reverse=True)
    assert [(e.author, e.post_id) for e in page.entries] == [
        (p.author, p.post_id) for p in expected
    ]
    assert page.texts == [p.text for p in expected]
    bodies = reader.bodies.keys([f"{p.author}!{p.post_id}" for p in posts])
    moving = cache.available(bodies).count(False)
    assert 0 < moving < len(bodies)  # some bodies moved, and the others were filled
    cache.close()
