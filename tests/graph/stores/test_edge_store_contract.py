"""One contract, every edge store: SQLite, FerretDB, and a real MongoDB when available."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.mongo_servers import MongoServer, ferretdb_deviation
from timeline_fanout.graph.model.edges import (
    EdgeChange,
    EdgeCounts,
    EdgeState,
    EdgeStore,
    PostKey,
    PostRecord,
    PostRef,
    Snapshot,
    StoredBodies,
)
from timeline_fanout.graph.model.keys import ListKind, ListRef
from timeline_fanout.graph.stores.mongo import MongoEdgeStore
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore


def follow(a: str, b: str, pos: int, group: str | None = None) -> EdgeChange:
    return EdgeChange(a, b, True, pos, group)


def unfollow(a: str, b: str, pos: int) -> EdgeChange:
    return EdgeChange(a, b, False, pos)


def test_follow_unfollow_queries(edge_store: EdgeStore) -> None:
    edge_store.apply(
        [
            follow("a", "star", 1),
            follow("b", "star", 2, "work"),
            follow("c", "star", 3),
            follow("a", "b", 4),
        ]
    )
    assert edge_store.followers("star") == ["a", "b", "c"]
    assert edge_store.followers("star", group="work") == ["b"]
    assert edge_store.following("a") == ["b", "star"]
    assert edge_store.counts("star") == EdgeCounts(3, 0)
    assert edge_store.counts("a") == EdgeCounts(0, 2)
    assert edge_store.is_following("a", "star") and not edge_store.is_following("star", "a")
    edge_store.apply([unfollow("a", "star", 5)])
    assert edge_store.followers("star") == ["b", "c"]
    assert edge_store.following("a") == ["b"]
    assert not edge_store.is_following("a", "star")


def test_pagination_is_ordered_and_complete(edge_store: EdgeStore) -> None:
    names = [f"f{i:04d}" for i in range(120)]
    edge_store.apply([follow(n, "star", i) for i, n in enumerate(names)])
    pages, after = [], None
    while page := edge_store.followers("star", after=after, limit=50):
        pages.append(page)
        after = page[-1]
    assert [len(p) for p in pages] == [50, 50, 20]
    assert [name for page in pages for name in page] == sorted(names)
    assert edge_store.all_members(ListRef(ListKind.FOLLOWERS, "star")) == sorted(names)
    assert edge_store.all_members(ListRef(ListKind.FOLLOWING, "f0001")) == ["star"]


def test_older_event_never_overwrites_newer(edge_store: EdgeStore) -> None:
    assert edge_store.apply([unfollow("a", "b", 10)]) == [unfollow("a", "b", 10)]
    # Stale, but not refused by a removal: its token is appended and loses by position.
    assert edge_store.apply([follow("a", "b", 5)]) == [follow("a", "b", 5)]
    assert not edge_store.is_following("a", "b")
    assert edge_store.positions([("a", "b")]) == {("a", "b"): EdgeState(False, 10)}
    assert edge_store.apply([follow("a", "b", 11)]) == [follow("a", "b", 11)]
    assert edge_store.is_following("a", "b")
    assert edge_store.positions([("a", "b")]) == {("a", "b"): EdgeState(True, 11)}


def test_redelivery_is_current_and_harmless(edge_store: EdgeStore) -> None:
    batch = [follow("a", "b", 1), follow("c", "b", 2)]
    assert sorted(edge_store.apply(batch), key=lambda c: c.pos) == batch
    assert sorted(edge_store.apply(batch), key=lambda c: c.pos) == batch  # replay: still current
    assert edge_store.followers("b") == ["a", "c"]


def test_batch_with_several_events_for_one_edge_collapses_to_the_last(
    edge_store: EdgeStore,
) -> None:
    result = edge_store.apply(
        [follow("a", "b", 1), unfollow("a", "b", 2), follow("a", "b", 3), unfollow("a", "b", 4)]
    )
    assert result == [unfollow("a", "b", 4)]
    assert not edge_store.is_following("a", "b")


def test_any_order_converges(edge_store: EdgeStore) -> None:
    rng = random.Random(3)
    events = []
    for pos in range(1, 400):
        a, b = rng.choice("abcdef"), rng.choice("ghij")
        events.append(EdgeChange(a, b, rng.random() < 0.6, pos))
    expected: dict[tuple[str, str], bool] = {}
    for e in events:
        expected[e.edge] = e.active
    shuffled = events[:]
    rng.shuffle(shuffled)
    for i in range(0, len(shuffled), 37):
        edge_store.apply(shuffled[i : i + 37])
    for (a, b), active in expected.items():
        assert edge_store.is_following(a, b) == active, (a, b)


def test_remove_user_removes_both_directions_and_blocks_older_follows(
    edge_store: EdgeStore,
) -> None:
    edge_store.apply(
        [follow("a", "u", 1), follow("b", "u", 2), follow("u", "c", 3), follow("a", "c", 4)]
    )
    removed = edge_store.remove_user("u", 10)
    assert sorted(removed.followers) == ["a", "b"] and removed.following == ("c",)
    assert edge_store.followers("u") == [] and edge_store.following("u") == []
    assert edge_store.followers("c") == ["a"]
    # Late but older than the removal: refused, so no token is appended for them.
    assert edge_store.apply([follow("d", "u", 9), follow("u", "e", 8), follow("d", "c", 9)]) == [
        follow("d", "c", 9)
    ]
    assert edge_store.followers("u") == [] and edge_store.following("u") == []
    assert edge_store.apply([follow("d", "u", 11)]) == [follow("d", "u", 11)]  # re-joined
    assert edge_store.followers("u") == ["d"]
    # b's only edge is switched off, yet b may still have a stale cached list: verify samples it.
    assert {"u", "b"} <= set(edge_store.users()) and "z" not in set(edge_store.users())


def test_known_users_tells_unknown_from_empty(edge_store: EdgeStore) -> None:
    edge_store.apply([follow("a", "b", 1), follow("c", "d", 2), unfollow("c", "d", 3)])
    edge_store.store_posts([PostRecord("poster", "p1", 5)])
    edge_store.apply([follow("r", "a", 4), follow("gone", "a", 4)])
    edge_store.store_posts([PostRecord("gone", "p2", 5)])
    edge_store.remove_user("r", 10)
    edge_store.remove_user("gone", 10)
    edge_store.apply([follow("r", "b", 11)])  # back after the removal
    everyone = ["a", "b", "c", "d", "poster", "r", "gone", "stranger"]
    # Inactive edges and posts count; a removed user counts again only once re-activated.
    assert edge_store.known_users(everyone) == {"a", "b", "c", "d", "poster", "r"}
    assert edge_store.known_users([]) == set()
    assert edge_store.known_users(["stranger"]) == set()


def test_followers_query_is_covered_on_real_mongodb(
    edge_store: EdgeStore, request: pytest.FixtureRequest
) -> None:
    if not isinstance(edge_store, MongoEdgeStore):
        pytest.skip("explain() plans exist only on a Mongo server")
    ferretdb_deviation(
        request,
        "the SQLite backend pushes only _id filters down (no index use, no executionStats)",
        "https://github.com/FerretDB/FerretDB/issues/3235",
    )
    edge_store.apply([follow(f"f{i}", "star", i) for i in range(50)])
    stats = edge_store.explain_followers("star")["executionStats"]
    assert stats["nReturned"] == 50
    assert stats["totalDocsExamined"] == 0  # index-only: no document was fetched


def test_posts_are_stored_once_and_read_newest_first(edge_store: EdgeStore) -> None:
    posts = [PostRecord(f"a{i % 3}", f"p{i}", 1000 + i, f"text {i}") for i in range(30)]
    edge_store.store_posts(posts)
    edge_store.store_posts(posts[:5])  # redelivery
    edge_store.store_posts([PostRecord("a0", "p0", 99999, "changed")])  # same id: ignored
    recent = edge_store.recent_posts({"a0", "a2"}, 5)
    assert [p.post_id for p in recent] == ["p29", "p27", "p26", "p24", "p23"]
    assert recent[0] == PostRecord("a2", "p29", 1029, "text 29")
    assert len(edge_store.recent_posts({"a0"}, 100)) == 10
    assert edge_store.recent_posts(set(), 10) == []


def test_an_authors_posts_page_newest_first_past_a_cursor_ties_included(
    edge_store: EdgeStore,
) -> None:
    """Pages of one author's posts, walked by the last post's (time, id), cover every post
    once in order, including posts sharing a time."""
    posts = [PostRecord("a", f"p{i:02d}", 1000 + i // 3, f"t{i}") for i in range(20)]
    edge_store.store_posts([*posts, PostRecord("b", "p99", 5000, "other author")])
    expected = sorted(posts, key=lambda p: (p.ts, p.post_id), reverse=True)
    walked: list[PostRecord] = []
    before = None
    while page := edge_store.author_posts("a", 3, before):
        walked += page
        before = PostKey(page[-1].ts, page[-1].post_id)
    assert walked == expected
    assert edge_store.author_posts("a", 0) == [] == edge_store.author_posts("nobody", 5)


def test_a_celebrity_who_was_never_removed_can_be_followed_and_unfollowed(
    edge_store: EdgeStore,
) -> None:
    edge_store.add_celebrities(["star"])
    assert edge_store.apply([follow("a", "star", 1)]) == [follow("a", "star", 1)]
    assert edge_store.apply([unfollow("a", "star", 2)]) == [unfollow("a", "star", 2)]
    assert edge_store.followers("star") == [] and edge_store.celebrities() == {"star"}


def test_celebrities_are_sticky(edge_store: EdgeStore) -> None:
    assert edge_store.celebrities() == set()
    edge_store.add_celebrities(["star", "idol"])
    edge_store.add_celebrities(["star"])
    assert edge_store.celebrities() == {"star", "idol"}


def test_remove_user_twice_with_the_same_position_names_the_same_neighbours(
    edge_store: EdgeStore,
) -> None:
    """A retry or a redelivery after the store step must still name every neighbour, or their
    lists keep the removed user."""
    edge_store.apply([follow("a", "u", 1), follow("b", "u", 2), follow("u", "c", 3)])
    first = edge_store.remove_user("u", 10)
    assert sorted(first.followers) == ["a", "b"] and first.following == ("c",)
    edge_store.apply([follow("d", "u", 11)])  # re-joined in between: not this removal's
    again = edge_store.remove_user("u", 10)
    assert sorted(again.followers) == sorted(first.followers)
    assert sorted(again.following) == sorted(first.following)
    assert edge_store.followers("u") == ["d"]
    assert edge_store.positions([("a", "u"), ("u", "c"), ("d", "u")]) == {
        ("a", "u"): EdgeState(False, 10),
        ("u", "c"): EdgeState(False, 10),
        ("d", "u"): EdgeState(True, 11),
    }


def test_a_removal_names_only_the_edges_it_switched_off(edge_store: EdgeStore) -> None:
    """RemovedUser: "neighbours whose edge was switched off by this removal". A neighbour who
    unfollowed earlier, or whose edge an earlier removal switched off, needs no ``-u`` token
    and no timeline invalidation (a celebrity's removal would otherwise touch every account
    that ever followed it)."""
    edge_store.apply([follow("a", "u", 1), follow("b", "u", 2), unfollow("b", "u", 3)])
    assert edge_store.remove_user("u", 10).followers == ("a",)
    edge_store.apply([follow("d", "u", 11)])
    assert edge_store.remove_user("u", 20).followers == ("d",)


def test_positions_report_what_the_store_holds_per_directed_edge(edge_store: EdgeStore) -> None:
    edge_store.apply([follow("a", "b", 7), follow("b", "c", 3), unfollow("c", "a", 9)])
    edge_store.apply([unfollow("b", "c", 8), follow("b", "c", 2)])  # the stale follow loses
    asked = [("a", "b"), ("b", "a"), ("b", "c"), ("c", "a"), ("z", "z")]
    assert edge_store.positions(asked) == {
        ("a", "b"): EdgeState(True, 7),
        ("b", "c"): EdgeState(False, 8),
        ("c", "a"): EdgeState(False, 9),
    }
    assert edge_store.positions([]) == {}
    many = [(f"f{i:04d}", "star") for i in range(900)]  # more than one query's worth
    edge_store.apply([follow(f, s, 100 + i) for i, (f, s) in enumerate(many)])
    found = edge_store.positions(many)
    assert found == {edge: EdgeState(True, 100 + i) for i, edge in enumerate(many)}


def test_snapshot_holds_active_members_sorted_with_their_positions(edge_store: EdgeStore) -> None:
    edge_store.apply(
        [
            follow("m", "star", 5),
            follow("c", "star", 9),
            follow("x", "star", 2),
            follow("a-b", "star", 7),
            follow("gone", "star", 3),
            follow("star", "q", 4),
            follow("star", "b", 6),
        ]
    )
    edge_store.apply([unfollow("gone", "star", 8), unfollow("x", "star", 1)])  # the 2nd is stale
    assert edge_store.snapshot(ListRef(ListKind.FOLLOWERS, "star")) == Snapshot(
        ["a-b", "c", "m", "x"], [7, 9, 5, 2]
    )
    assert edge_store.snapshot(ListRef(ListKind.FOLLOWING, "star")) == Snapshot(["b", "q"], [6, 4])
    assert edge_store.snapshot(ListRef(ListKind.FOLLOWERS, "nobody")) == Snapshot([], [])
    assert edge_store.all_members(ListRef(ListKind.FOLLOWERS, "star")) == ["a-b", "c", "m", "x"]


def test_store_posts_answers_the_first_stored_time(edge_store: EdgeStore) -> None:
    first = edge_store.store_posts([PostRecord("a", "p1", 100, "hi"), PostRecord("b", "p1", 50)])
    assert first == {
        PostRef("a", "p1"): PostRecord("a", "p1", 100, "hi"),
        PostRef("b", "p1"): PostRecord("b", "p1", 50),
    }
    again = edge_store.store_posts([PostRecord("a", "p1", 999, "edited"), PostRecord("a", "p2", 7)])
    assert again == {  # published twice: still one entry, with its first text
        PostRef("a", "p1"): PostRecord("a", "p1", 100, "hi"),
        PostRef("a", "p2"): PostRecord("a", "p2", 7),
    }
    assert edge_store.recent_posts({"a"}, 10) == [
        PostRecord("a", "p1", 100, "hi"),
        PostRecord("a", "p2", 7, None),
    ]
    assert edge_store.store_posts([]) == {}


def test_a_deleted_post_is_gone_for_good_whichever_event_came_first(
    edge_store: EdgeStore,
) -> None:
    """Stored then deleted, or deleted before it was ever stored: no answer names it again,
    and storing it again (a retry, a replay) stores nothing. Other posts are untouched."""
    edge_store.store_posts([PostRecord("a", "p1", 100, "one"), PostRecord("a", "p2", 200, "two")])
    # p3: not stored yet. The answer names the stored ones with their times, again on a retry.
    deleted = edge_store.delete_posts([PostRef("a", "p1"), PostRef("a", "p3")])
    assert deleted == {PostRef("a", "p1"): 100}
    assert edge_store.delete_posts([PostRef("a", "p1")]) == deleted  # redelivered: no change
    again = [PostRecord("a", "p1", 100, "one"), PostRecord("a", "p3", 300, "three")]
    assert edge_store.store_posts(again) == {}
    assert edge_store.recent_posts({"a"}, 10) == [PostRecord("a", "p2", 200, "two")]
    assert edge_store.author_posts("a", 10) == [PostRecord("a", "p2", 200, "two")]
    assert edge_store.author_posts("a", 10, PostKey(250, "p")) == [
        PostRecord("a", "p2", 200, "two")
    ]
    refs = [PostRef("a", p) for p in ("p1", "p2", "p3", "p4")]
    assert edge_store.post_bodies(refs) == StoredBodies(
        {PostRef("a", "p2"): "two"}, {PostRef("a", "p1"), PostRef("a", "p3")}
    )


RACE_POSTS = 1200


def race_posts_against_deletes(open_store: Callable[[], EdgeStore]) -> StoredBodies:
    """Two stores on the same data (two connections, as a live consumer and a replay have),
    two threads: one stores posts, the other deletes the same posts, batch by batch, released
    together by a barrier; each batch in its own order. Returns what the store holds then."""
    open_store().close()
    barrier = threading.Barrier(2, timeout=60)
    errors: list[BaseException] = []
    refs = [PostRef(f"a{i % 7}", f"p{i}") for i in range(RACE_POSTS)]
    batches = [refs[start : start + RACE_BATCH] for start in range(0, RACE_POSTS, RACE_BATCH)]

    def run(work: Callable[[EdgeStore, list[PostRef]], None], seed: int) -> None:
        store = open_store()
        shuffle = random.Random(seed).shuffle
        try:
            for batch in batches:
                mine = list(batch)
                shuffle(mine)
                barrier.wait()
                work(store, mine)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()
        finally:
            store.close()

    def stores(store: EdgeStore, batch: list[PostRef]) -> None:
        store.store_posts([PostRecord(r.author, r.post_id, 7, "text") for r in batch])

    def deletes(store: EdgeStore, batch: list[PostRef]) -> None:
        store.delete_posts(batch)

    threads = [
        threading.Thread(target=run, args=(work, seed))
        for seed, work in enumerate((stores, deletes))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    check = open_store()
    try:
        assert check.recent_posts({f"a{i}" for i in range(7)}, RACE_POSTS) == []
        return check.post_bodies(refs)
    finally:
        check.close()


def test_sqlite_keeps_a_post_deleted_whichever_of_store_and_delete_commits_first(
    tmp_path: Path,
) -> None:
    path = tmp_path / "edges.db"
    found = race_posts_against_deletes(lambda: SqliteEdgeStore(path))
    assert found.texts == {} and len(found.deleted) == RACE_POSTS


@pytest.mark.parametrize("mode", ["collection", "index"])
def test_mongo_keeps_a_post_deleted_whichever_of_store_and_delete_writes_first(
    mode: Any, ferretdb: MongoServer
) -> None:
    name = f"race_posts_{mode}"
    found = race_posts_against_deletes(lambda: MongoEdgeStore(ferretdb.client()[name], mode))
    assert found.texts == {} and len(found.deleted) == RACE_POSTS


# -- removals racing follows ---------------------------------------------------------------

RACE_USERS = 2400
RACE_BATCH = 8


def race_follows_against_removals(
    path: Path, open_store: Callable[[Path], EdgeStore]
) -> tuple[list[str], int]:
    """Two stores on one file (two connections, as two consumer processes have), two threads:
    one follows ``star`` for each user (position ``t + 50``), the other removes those users
    (``t + 100``), batch by batch, both released together by a barrier. Returns the removed
    users still following, and how many follows the store did not refuse."""
    open_store(path).close()  # the schema and WAL mode, before the two connections race
    barrier = threading.Barrier(2, timeout=60)
    errors: list[BaseException] = []
    accepted: list[int] = []
    batches = [
        [f"u{i:05d}" for i in range(start, min(start + RACE_BATCH, RACE_USERS))]
        for start in range(0, RACE_USERS, RACE_BATCH)
    ]

    def t(user: str) -> int:
        return 1000 * int(user[1:])

    def run(work: Callable[[EdgeStore, list[str]], None]) -> None:
        store = open_store(path)  # sqlite3 connections belong to the thread that opens them
        try:
            for batch in batches:
                barrier.wait()
                work(store, batch)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()
        finally:
            store.close()

    def follows(store: EdgeStore, batch: list[str]) -> None:
        accepted.append(len(store.apply([follow(u, "star", t(u) + 50) for u in batch])))

    def removals(store: EdgeStore, batch: list[str]) -> None:
        for user in batch:
            store.remove_user(user, t(user) + 100)

    threads = [threading.Thread(target=run, args=(work,)) for work in (follows, removals)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    check = open_store(path)
    try:
        return check.followers("star", limit=RACE_USERS + 1), sum(accepted)
    finally:
        check.close()


def test_sqlite_never_keeps_a_follow_older_than_a_racing_removal(tmp_path: Path) -> None:
    """The removal check and the write are one IMMEDIATE transaction. (Reading
    ``users.removed`` before the write transaction lets a removal commit in between, and the
    older follow stays active: 80-170 such users in every run of 5 of this race.)"""
    active, accepted = race_follows_against_removals(tmp_path / "edges.db", SqliteEdgeStore)
    assert active == []
    assert 0 < accepted < RACE_USERS  # both orders happened: the race was a race


class _RemovalAfterTheCheck(MongoEdgeStore):
    """Another consumer's removal lands between ``apply``'s removal check and its writes:
    made deterministic by running it right after the check's read."""

    racing: list[tuple[str, int]]

    def _removed(self, users: set[str]) -> dict[str, int]:
        found = super()._removed(users)
        while self.racing:
            self.remove_user(*self.racing.pop())
        return found


@pytest.mark.parametrize("mode", ["collection", "index"])
def test_mongo_switches_off_a_follow_whose_removal_slipped_in_before_the_write(
    mode: Any, ferretdb: MongoServer
) -> None:
    """The check after the write (the Dekker pattern) catches a removal its check before the
    write missed, whether the edge is new (inserted, then switched off) or existed (the
    removal switched it off first, so the stale upsert is refused as a duplicate)."""
    store = _RemovalAfterTheCheck(ferretdb.client()[f"race_{mode}"], mode)
    store.racing = []
    store.apply([follow("old", "u", 1), follow("a", "b", 2)])
    store.racing = [("u", 100)]
    live = store.apply([follow("d", "u", 50), follow("old", "u", 60), follow("a", "b", 70)])
    assert live == [follow("a", "b", 70)]  # the follows older than the removal are refused
    assert (
        store.followers("u") == [] and store.following("d") == [] and store.following("old") == []
    )
    assert store.positions([("d", "u"), ("old", "u"), ("a", "b")]) == {
        ("d", "u"): EdgeState(False, 100),
        ("old", "u"): EdgeState(False, 100),
        ("a", "b"): EdgeState(True, 70),
    }
    assert store.snapshot(ListRef(ListKind.FOLLOWING, "d")) == Snapshot([], [])
    # Without the race, the same late follow is refused by the check before the write.
    assert store.apply([follow("e", "u", 99)]) == [] and store.followers("u") == []


def test_the_same_millisecond_removal_hole(edge_store: EdgeStore) -> None:
    """The documented hole: positions order events by time, then by offset in their own
    partition, so a follow and a removal of the same millisecond on two partitions are ordered
    by their offsets, not by which happened first. Here the follow (offset 9 on its partition)
    outranks the removal (offset 3 on its own) although the removal was applied first."""
    ms = 1_700_000_000_000
    edge_store.remove_user("u", (ms << 20) | 3)
    assert edge_store.apply([follow("u", "v", (ms << 20) | 9)]) != []
    assert edge_store.is_following("u", "v")  # the hole: the follow survives
    assert not edge_store.apply(
        [follow("u", "w", ((ms - 1) << 20) | 9)]
    )  # a millisecond older: refused


# -- maintained counts -----------------------------------------------------------------------


def test_counts_move_only_when_an_edge_changes_state_and_equal_a_recount(
    edge_store: EdgeStore,
) -> None:
    """Replays, stale writes, out-of-order batches, refollows and removals: after every batch
    each user's kept counts equal the counts computed from the edges."""
    rng = random.Random(11)
    users = [f"u{i}" for i in range(8)]
    events: list[EdgeChange] = []
    for pos in range(1, 600):
        a, b = rng.sample(users, 2)
        events.append(EdgeChange(a, b, rng.random() < 0.6, pos))
    batches = [events[i : i + 23] for i in range(0, len(events), 23)]
    rng.shuffle(batches)
    for n, batch in enumerate(batches):
        edge_store.apply(batch)
        edge_store.apply(batch[: len(batch) // 2])  # a replay of part of it changes nothing
        if n % 7 == 3:
            edge_store.remove_user(rng.choice(users), rng.randrange(1, 700))
        for user in users:
            assert edge_store.counts(user) == edge_store.recounted(user), (n, user)
    assert edge_store.counts("nobody") == EdgeCounts(0, 0)


def test_counts_of_a_refollow_and_of_a_removal_retried(edge_store: EdgeStore) -> None:
    edge_store.apply([follow("a", "b", 1), follow("c", "b", 2)])
    edge_store.apply([unfollow("a", "b", 3), follow("a", "b", 4)])  # one batch: the last wins
    assert edge_store.counts("b") == EdgeCounts(2, 0)
    edge_store.apply([unfollow("a", "b", 5)])
    edge_store.apply([follow("a", "b", 6)])
    assert edge_store.counts("b") == EdgeCounts(2, 0) and edge_store.counts("a") == EdgeCounts(0, 1)
    edge_store.remove_user("b", 10)
    edge_store.remove_user("b", 10)  # retried: nothing switched off twice
    assert edge_store.counts("b") == EdgeCounts(0, 0)
    assert edge_store.counts("a") == EdgeCounts(0, 0) == edge_store.counts("c")


def test_a_page_past_any_id_starts_at_the_next_active_member(edge_store: EdgeStore) -> None:
    edge_store.apply([follow(n, "star", i) for i, n in enumerate(["b", "d", "f", "h"], 1)])
    edge_store.apply([unfollow("d", "star", 10), follow("star", "x", 11), follow("star", "z", 12)])
    assert edge_store.followers("star", after="c", limit=2) == ["f", "h"]  # not a member
    assert edge_store.followers("star", after="a", limit=2) == ["b", "f"]  # d unfollowed
    assert edge_store.followers("star", after="h", limit=2) == []
    assert edge_store.following("star", after="y", limit=5) == ["z"]


@pytest.mark.parametrize("limit", [0, -1])
def test_a_page_never_holds_more_than_its_limit(edge_store: EdgeStore, limit: int) -> None:
    """pymongo reads a limit of 0 as "no limit" and SQLite a negative one: neither is a page."""
    edge_store.apply([follow(n, "star", i) for i, n in enumerate("abcde", 1)])
    edge_store.apply([follow("star", n, i) for i, n in enumerate("vwxyz", 10)])
    assert edge_store.followers("star", limit=limit) == []
    assert edge_store.following("star", limit=limit) == []
