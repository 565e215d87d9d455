"""Author pages against real memcached and SQLite: served from the author's cached item as the
store would serve them, kept right by invalidation after every store write and the fill's
fence (graph/timelines/author_pages.py), and blind to deleted posts at once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from tests.graph.timelines.warm_pair import Pair
from timeline_fanout.graph.model.edges import PostKey, PostRecord, PostRef
from timeline_fanout.graph.model.keys import KeySpace
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore
from timeline_fanout.graph.timelines.author_pages import ITEM_POSTS, AuthorPages
from timeline_fanout.graph.timelines.post_bodies import PostBodies
from timeline_fanout.memcache import MemcacheCluster


class RacedStore(SqliteEdgeStore):
    """Runs ``meanwhile`` once, right after its next ``author_posts`` answered: another
    process's write between a fill's store read and its CAS."""

    meanwhile: Callable[[], None] | None = None

    def author_posts(
        self, author: str, limit: int, before: PostKey | None = None
    ) -> list[PostRecord]:
        found = super().author_posts(author, limit, before)
        run, self.meanwhile = self.meanwhile, None
        if run is not None:
            run()
        return found


class Author:
    def __init__(self, store: RacedStore, cache: MemcacheCluster, unique: str) -> None:
        self.store = store
        self.bodies = PostBodies(cache, store, KeySpace(unique), 3600)
        self.pages = AuthorPages(cache, store, KeySpace(unique), self.bodies, 3600)

    def post(self, *posts: PostRecord) -> None:
        """The fan-out's order: the store (with the bodies), then the authors' items."""
        self.bodies.store(posts)
        self.pages.invalidate([p.author for p in posts])

    def delete(self, ref: PostRef, invalidate: bool = True) -> None:
        self.store.delete_posts([ref])
        self.bodies.delete([ref])
        if invalidate:
            self.pages.invalidate([ref.author])

    def walk(self, user: str, limit: int) -> list[PostRecord]:
        shown: list[PostRecord] = []
        cursor = None
        while True:
            page = self.pages.page(user, limit, cursor)
            shown += page.posts
            if page.next is None:
                return shown
            cursor = page.next


@pytest.fixture
def author(tmp_path: object, cache: MemcacheCluster, unique: str) -> Iterator[Author]:
    store = RacedStore(f"{tmp_path}/edges.db")
    yield Author(store, cache, unique)
    store.close()


def test_pages_from_the_item_and_past_it_are_the_stores_pages_ties_included(
    author: Author,
) -> None:
    posts = [PostRecord("ann", f"p{i:03d}", 1000 + i // 4, f"text {i}") for i in range(250)]
    author.post(*posts, PostRecord("bob", "p999", 5000, "not ann's"))
    expected = sorted(posts, key=lambda p: (p.ts, p.post_id), reverse=True)
    assert len(posts) > ITEM_POSTS  # the walk crosses from the item to the store
    for limit in (1, 7, 50):
        assert author.walk("ann", limit) == expected


def test_a_fill_that_read_the_store_before_a_post_never_hides_it_after_its_batch(
    author: Author,
) -> None:
    author.post(PostRecord("ann", "p1", 1, "one"))
    author.pages.invalidate(["ann"])
    author.store.meanwhile = lambda: author.post(PostRecord("ann", "p2", 2, "two"))
    assert [p.post_id for p in author.pages.page("ann", 10, None).posts] == ["p1"]
    assert [p.post_id for p in author.pages.page("ann", 10, None).posts] == ["p2", "p1"]


def test_a_deleted_post_is_gone_at_once_and_the_page_reads_on_past_it(author: Author) -> None:
    author.post(*(PostRecord("ann", f"p{i}", i, f"t{i}") for i in range(10)))
    assert [p.post_id for p in author.pages.page("ann", 3, None).posts] == ["p9", "p8", "p7"]
    author.delete(PostRef("ann", "p8"), invalidate=False)  # the item has not seen it yet
    author.delete(PostRef("ann", "p9"), invalidate=False)
    page = author.pages.page("ann", 3, None)
    assert [(p.post_id, p.text) for p in page.posts] == [("p7", "t7"), ("p6", "t6"), ("p5", "t5")]
    assert [p.post_id for p in author.pages.page("ann", 3, page.next).posts] == ["p4", "p3", "p2"]


def test_a_warm_author_page_is_the_blocking_page_in_two_multi_gets(pair: Pair) -> None:
    for i in range(5):
        pair.post("ann", f"p{i}", [], ago_ms=1000 * i)
    pages = pair.blocking.author_pages
    pages.invalidate(["ann"])  # as the fan-out does after storing them
    blocking = pages.page("ann", 3, None)  # fills the item

    async def warm() -> object:
        try:
            return await pair.warm_reads.author_page("ann", 3, None)
        finally:
            pair.warm_reads.close()

    pair.multi_gets.clear()
    assert asyncio.run(warm()) == blocking
    assert len(pair.multi_gets) == 2  # the item, then the posts' bodies
    pages.invalidate(["ann"])
    assert asyncio.run(warm()) is None  # the item must be filled: the blocking read does it


def test_an_item_holding_a_member_not_of_our_form_is_dropped_and_filled_again(
    author: Author, cache: MemcacheCluster
) -> None:
    author.post(*(PostRecord("ann", f"p{i}", i, f"t{i}") for i in range(3)))
    key = author.pages.keys(["ann"])[0]
    cache.set_many({key: b"all 0000000000001!ann!p1 garbage"})
    assert [p.post_id for p in author.pages.page("ann", 10, None).posts] == ["p2", "p1", "p0"]
    value = cache.get_many([key])[key]
    assert b"garbage" not in value and value.startswith(b"all ")
