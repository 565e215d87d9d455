"""Post body items against real memcached and SQLite: texts in, deletions out, and no fill that
read the store before a deletion ever writes the post back (the fence,
graph/timelines/post_bodies.py). Each race is made deterministic by running the other side at
the worst moment: inside the store call that the fence puts after its ``gets``."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import pytest

from timeline_fanout.graph.model.edges import PostRecord, PostRef, StoredBodies
from timeline_fanout.graph.model.fresh import Fresh
from timeline_fanout.graph.model.keys import KeySpace
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore
from timeline_fanout.graph.timelines.post_bodies import DELETED, PostBodies
from timeline_fanout.memcache import Item, MemcacheCluster


class RacedStore(SqliteEdgeStore):
    """Runs ``meanwhile`` once, right after its next ``post_bodies`` or ``store_posts``
    answered: what another process does between a fill's store read and its CAS."""

    meanwhile: Callable[[], None] | None = None

    def _race(self) -> None:
        run, self.meanwhile = self.meanwhile, None
        if run is not None:
            run()

    def post_bodies(self, posts: Collection[PostRef]) -> StoredBodies:
        found = super().post_bodies(posts)
        self._race()
        return found

    def store_posts(self, posts: Sequence[PostRecord]) -> dict[PostRef, PostRecord]:
        stored = super().store_posts(posts)
        self._race()
        return stored


@pytest.fixture
def raced(tmp_path: object, cache: MemcacheCluster, unique: str) -> tuple[RacedStore, PostBodies]:
    store = RacedStore(f"{tmp_path}/edges.db")
    return store, PostBodies(cache, store, KeySpace(unique), 3600)


def delete(store: SqliteEdgeStore, bodies: PostBodies, *refs: PostRef) -> None:
    """The consumer's order: the store's tombstone, then the item."""
    store.delete_posts(refs)
    bodies.delete(refs)


P = PostRef("ann", "p1")


def test_texts_are_read_back_as_stored_and_a_post_without_text_is_none(
    raced: tuple[RacedStore, PostBodies], cache: MemcacheCluster
) -> None:
    _, bodies = raced
    bodies.store([PostRecord("ann", "p1", 5, "héllo <b>"), PostRecord("ann", "p2", 6)])
    bodies.store([PostRecord("ann", "p1", 9, "edited")])  # published again: the first text
    read = bodies.read(["ann!p1", "ann!p2"], {})
    assert read.texts == {"ann!p1": "héllo <b>", "ann!p2": None} and read.gone == set()
    cache.set_many(dict.fromkeys(bodies.keys(["ann!p1"]), b"\xffnot ours"))
    assert bodies.read(["ann!p1"], {}).texts == {"ann!p1": "héllo <b>"}  # filled again
    cache.delete_many(bodies.keys(["ann!p1", "ann!p2"]))  # evicted: filled from the store
    assert bodies.read(["ann!p1", "ann!p2"], {}).texts == {"ann!p1": "héllo <b>", "ann!p2": None}


def test_a_fill_that_read_the_store_before_a_deletion_never_writes_the_post_back(
    raced: tuple[RacedStore, PostBodies], cache: MemcacheCluster
) -> None:
    store, bodies = raced
    store.store_posts([PostRecord("ann", "p1", 5, "text")])  # no item: readers fill it
    store.meanwhile = lambda: delete(store, bodies, P)
    first = bodies.read(["ann!p1"], {})
    assert first.texts == {"ann!p1": "text"}  # read concurrently with the deletion
    assert cache.get_many(bodies.keys(["ann!p1"])) == dict.fromkeys(
        bodies.keys(["ann!p1"]), DELETED
    )
    assert bodies.read(["ann!p1"], {}).gone == {"ann!p1"}


def test_a_fill_whose_item_vanished_after_its_gets_writes_nothing(
    raced: tuple[RacedStore, PostBodies], cache: MemcacheCluster
) -> None:
    store, bodies = raced
    store.store_posts([PostRecord("ann", "p1", 5, "text")])
    keys = bodies.keys(["ann!p1"])

    def evicted_then_deleted() -> None:
        cache.delete_many(keys)
        store.delete_posts([P])  # the tombstone's item write is lost with the server

    store.meanwhile = evicted_then_deleted
    bodies.read(["ann!p1"], {})
    assert cache.get_many(keys) == {}  # the CAS found no item
    assert bodies.read(["ann!p1"], {}).gone == {"ann!p1"}  # the next fill reads the tombstone


def test_storing_a_post_racing_its_deletion_leaves_it_deleted(
    raced: tuple[RacedStore, PostBodies], cache: MemcacheCluster
) -> None:
    """The fan-out's store step is the same fence: its CAS of the live text comes after a
    deletion that ran between its store write and its CAS, and fails."""
    store, bodies = raced
    store.meanwhile = lambda: delete(store, bodies, P)
    stored = bodies.store([PostRecord("ann", "p1", 5, "text")])
    assert stored == {P: PostRecord("ann", "p1", 5, "text")}  # stored before the deletion
    assert bodies.read(["ann!p1"], {}).gone == {"ann!p1"}
    assert bodies.store([PostRecord("ann", "p1", 5, "text")]) == {}  # and again: deleted
    assert bodies.read(["ann!p1"], {}).gone == {"ann!p1"}


def test_a_deletion_before_its_post_and_an_evicted_tombstone_stay_deleted(
    raced: tuple[RacedStore, PostBodies], cache: MemcacheCluster
) -> None:
    store, bodies = raced
    delete(store, bodies, P)
    assert bodies.store([PostRecord("ann", "p1", 5, "text")]) == {}
    cache.delete_many(bodies.keys(["ann!p1"]))
    assert bodies.read(["ann!p1"], {}).gone == {"ann!p1"}
    assert cache.get_many(bodies.keys(["ann!p1"])) == dict.fromkeys(
        bodies.keys(["ann!p1"]), DELETED
    )


def test_every_body_item_expires_within_heal_s(
    tmp_path: object, cache: MemcacheCluster, unique: str
) -> None:
    """As every cached item (bounded self-healing): stored, filled and deleted items alike."""
    store = SqliteEdgeStore(f"{tmp_path}/edges.db")
    bodies = PostBodies(cache, store, KeySpace(unique), 7)
    bodies.store([PostRecord("ann", "p1", 5, "text")])
    store.store_posts([PostRecord("ann", "p2", 6)])
    bodies.read(["ann!p2"], {})  # filled by a reader
    bodies.delete([PostRef("ann", "p3")])
    items = cache.gets_many(bodies.keys(["ann!p1", "ann!p2", "ann!p3"]))
    assert len(items) == 3 and all(0 < item.ttl <= 7 for item in items.values())
    store.close()


READER = "reader"  # whose copy of the deletion mark the reads here ask


def marked(cache: MemcacheCluster, bodies: PostBodies) -> dict[bytes, Item]:
    """A read's first multi-GET as far as bodies care: the deletion mark, put if missing."""
    bodies.keep_mark(READER, {})
    found = cache.gets_many([bodies.mark_key(READER)])
    assert bodies.mark_key(READER) in found
    return found


def test_a_text_read_under_a_mark_is_answered_without_its_item_while_the_mark_stands(
    raced: tuple[RacedStore, PostBodies], cache: MemcacheCluster
) -> None:
    """The item is rewritten behind the process's back (as no writer does) to see which one
    a read answers from."""
    _, bodies = raced
    bodies.store([PostRecord("ann", "p1", 5, "text")])
    found = marked(cache, bodies)
    assert bodies.read(["ann!p1"], found).texts == {"ann!p1": "text"}
    cache.set_many(dict.fromkeys(bodies.keys(["ann!p1"]), b"tother"))
    assert bodies.read(["ann!p1"], found).texts == {"ann!p1": "text"}  # the mark stands
    assert bodies.read(["ann!p1"], {}).texts == {"ann!p1": "other"}  # no mark: the item
    cache.set_many({bodies.mark_key(READER): b"another"})
    changed = cache.gets_many([bodies.mark_key(READER)])
    assert bodies.read(["ann!p1"], changed).texts == {"ann!p1": "other"}


def test_a_text_remembered_before_a_deletion_is_never_answered_after_it(
    raced: tuple[RacedStore, PostBodies], cache: MemcacheCluster
) -> None:
    store, bodies = raced
    bodies.store([PostRecord("ann", "p1", 5, "text")])
    assert bodies.read(["ann!p1"], marked(cache, bodies)).texts == {"ann!p1": "text"}
    delete(store, bodies, P)
    assert bodies.read(["ann!p1"], marked(cache, bodies)).gone == {"ann!p1"}
    cache.delete_many([bodies.mark_key(READER)])  # evicted: a fresh one is put, never the old value
    assert bodies.read(["ann!p1"], marked(cache, bodies)).gone == {"ann!p1"}


def test_a_deletion_between_the_mark_and_the_body_read_leaves_nothing_remembered(
    raced: tuple[RacedStore, PostBodies], cache: MemcacheCluster
) -> None:
    """A read that found the mark before a deletion and reads the body after its ``x`` sees
    the ``x``: nothing live is remembered under the mark it found."""
    store, bodies = raced
    bodies.store([PostRecord("ann", "p1", 5, "text")])
    before = marked(cache, bodies)
    delete(store, bodies, P)
    assert bodies.read(["ann!p1"], before).gone == {"ann!p1"}
    assert bodies.read(["ann!p1"], before).gone == {"ann!p1"}


def test_a_body_read_in_the_marks_own_multi_get_is_not_remembered(
    raced: tuple[RacedStore, PostBodies], cache: MemcacheCluster
) -> None:
    """The mark and a body in one multi-GET were read in no known order (two servers): the
    body may predate a deletion whose mark was read, so it is taken but not remembered."""
    _, bodies = raced
    bodies.store([PostRecord("ann", "p1", 5, "text")])
    mark = marked(cache, bodies)
    together = cache.gets_many([bodies.mark_key(READER), *bodies.keys(["ann!p1"])])
    assert bodies.read(["ann!p1"], together).texts == {"ann!p1": "text"}
    cache.set_many(dict.fromkeys(bodies.keys(["ann!p1"]), b"tother"))
    assert bodies.read(["ann!p1"], mark).texts == {"ann!p1": "other"}


def test_a_known_text_is_served_until_its_heal_time_and_read_again_after_it(
    tmp_path: object, cache: MemcacheCluster, unique: str
) -> None:
    """As an item expires after ``heal_s``, so does what a process knows of it: a wrong text
    written into an item (as nothing here writes) is not kept past that. The bodies' monotonic
    clock is the test's, moved to either side of the deadline."""
    now = [100.0]
    store = SqliteEdgeStore(f"{tmp_path}/edges.db")
    bodies = PostBodies(cache, store, KeySpace(unique), 7, fresh=Fresh(monotonic=lambda: now[0]))
    bodies.store([PostRecord("ann", "p1", 5, "text")])
    found = marked(cache, bodies)
    assert bodies.read(["ann!p1"], found).texts == {"ann!p1": "text"}  # known until 107
    cache.set_many(dict.fromkeys(bodies.keys(["ann!p1"]), b"tother"))
    now[0] = 106.9
    assert bodies.read(["ann!p1"], found).texts == {"ann!p1": "text"}
    now[0] = 107.0
    assert bodies.read(["ann!p1"], found).texts == {"ann!p1": "other"}
    store.close()
