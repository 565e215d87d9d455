"""One contract, every edge store: SQLite, mongomock, and a real MongoDB when available."""

from __future__ import annotations

import random

from graph.edges import EdgeChange, EdgeCounts, EdgeStore
from graph.lists import ListKind, ListRef


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
    assert edge_store.apply([follow("a", "b", 5)]) == []  # stale: not current, no token
    assert not edge_store.is_following("a", "b")
    assert edge_store.apply([follow("a", "b", 11)]) == [follow("a", "b", 11)]
    assert edge_store.is_following("a", "b")


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
    assert edge_store.apply([follow("d", "u", 9), follow("u", "e", 8)]) == []  # late but older
    assert edge_store.followers("u") == [] and edge_store.following("u") == []
    assert edge_store.apply([follow("d", "u", 11)]) == [follow("d", "u", 11)]  # re-joined
    assert edge_store.followers("u") == ["d"]
    assert "u" in set(edge_store.users()) and "b" not in set(edge_store.users())


def test_followers_query_is_covered_on_real_mongodb(edge_store: EdgeStore) -> None:
    from graph.mongo_edges import MongoEdgeStore

    if (
        not isinstance(edge_store, MongoEdgeStore)
        or "mongomock" in type(edge_store._db.client).__module__
    ):
        import pytest

        pytest.skip("explain() plans exist only on a real MongoDB server")
    edge_store.apply([follow(f"f{i}", "star", i) for i in range(50)])
    stats = edge_store.explain_followers("star")["executionStats"]
    assert stats["nReturned"] == 50
    assert stats["totalDocsExamined"] == 0  # index-only: no document was fetched


def test_posts_are_stored_once_and_read_newest_first(edge_store: EdgeStore) -> None:
    from graph.edges import PostRecord

    posts = [PostRecord(f"a{i % 3}", f"p{i}", 1000 + i, f"text {i}") for i in range(30)]
    edge_store.store_posts(posts)
    edge_store.store_posts(posts[:5])  # redelivery
    edge_store.store_posts([PostRecord("a0", "p0", 99999, "changed")])  # same id: ignored
    recent = edge_store.recent_posts({"a0", "a2"}, 5)
    assert [p.post_id for p in recent] == ["p29", "p27", "p26", "p24", "p23"]
    assert recent[0] == PostRecord("a2", "p29", 1029, "text 29")
    assert len(edge_store.recent_posts({"a0"}, 100)) == 10
    assert edge_store.recent_posts(set(), 10) == []


def test_celebrities_are_sticky(edge_store: EdgeStore) -> None:
    assert edge_store.celebrities() == set()
    edge_store.add_celebrities(["star", "idol"])
    edge_store.add_celebrities(["star"])
    assert edge_store.celebrities() == {"star", "idol"}
