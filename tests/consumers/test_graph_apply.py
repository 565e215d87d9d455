"""The graph applier against real memcached and SQLite: the races an unfenced design has (see
docs/testing.md), each replayed as its interleaving, with every list cached first so that appends
really happen."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from timeline_fanout.consumers.graph_apply import GraphApplier
from timeline_fanout.consumers.positions import Origin, Positioned
from timeline_fanout.graph import (
    EdgeChange,
    ListKind,
    ListRef,
    ListSettings,
)
from timeline_fanout.graph.lists.capped import CappedLayout
from timeline_fanout.graph.lists.sharded import ShardedLayout
from timeline_fanout.graph.lists.token_lists import TokenLists
from timeline_fanout.graph.model.edges import PostRecord
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore
from timeline_fanout.graph.timelines.reader import TimelineReader, TimelineSource
from timeline_fanout.memcache.cluster import MemcacheCluster
from timeline_fanout.schemas import Follow, Unfollow, UserRemoved

ORIGIN = Origin("t.graph", 0, 0, None)


def follow(a: str, b: str, pos: int) -> Positioned:
    return Positioned(Follow(type="follow", follower=a, followee=b), pos, ORIGIN, b"")


def unfollow(a: str, b: str, pos: int) -> Positioned:
    return Positioned(Unfollow(type="unfollow", follower=a, followee=b), pos, ORIGIN, b"")


def removed(user: str, pos: int) -> Positioned:
    return Positioned(UserRemoved(type="user_removed", user=user), pos, ORIGIN, b"")


def fl(user: str) -> ListRef:
    return ListRef(ListKind.FOLLOWERS, user)


def fg(user: str) -> ListRef:
    return ListRef(ListKind.FOLLOWING, user)


@pytest.fixture
def appliers(
    cache: MemcacheCluster, sqlite_store: SqliteEdgeStore, tmp_path: Path, unique: str
) -> Iterator[tuple[GraphApplier, GraphApplier]]:
    """Two consumers (of two partitions, or a live one and a replay/zombie) on one store file
    (the ``sqlite_store`` fixture's), each with its own connection."""
    settings = ListSettings(namespace=unique, shard_bytes=128, compact_write_prob=0)
    second = SqliteEdgeStore(tmp_path / "edges.db")
    yield (
        GraphApplier(sqlite_store, TokenLists(ShardedLayout, cache, sqlite_store, settings)),
        GraphApplier(second, TokenLists(ShardedLayout, cache, second, settings)),
    )
    second.close()


def test_a_follow_appended_after_a_removal_and_a_rebuild_does_not_resurrect(
    appliers: tuple[GraphApplier, GraphApplier],
) -> None:
    """A follow racing a removal: the follow's consumer writes the store; the removal (another
    partition) switches the edge off; a reader rebuilds fl:v; then the follow's token is
    appended."""
    a, b = appliers
    a.apply([follow("keep", "v", 1)])
    a.lists.read_many([fl("v"), fg("r")])
    recorded = a.record([follow("r", "v", 50)])  # store step of the follow
    b.apply([removed("r", 100)])  # the removal, complete
    a.lists.invalidate([fl("v")])
    assert a.lists.read(fl("v")) == {"keep"}  # a reader rebuilds from the store
    corrections = a.update_lists(recorded)  # the follow's late list step
    assert corrections == 1
    assert a.lists.read(fl("v")) == {"keep"} == set(a.store.followers("v"))


def test_a_replay_over_live_state_changes_nothing(
    appliers: tuple[GraphApplier, GraphApplier],
) -> None:
    """A replay or a zombie: the replay reads an edge as active, the live consumer applies a newer
    unfollow, then the replay appends its old follow, also across a rebuild in between (the
    zombie consumer is the same mechanism)."""
    live, replay = appliers
    live.apply([follow("u", "v", 10), follow("w", "v", 11)])
    live.lists.read_many([fl("v"), fg("u")])
    for rebuild_between in (False, True):
        recorded = replay.record([follow("u", "v", 10)])
        live.apply([unfollow("u", "v", 20 + rebuild_between)])
        if rebuild_between:
            live.lists.invalidate([fl("v"), fg("u")])
            live.lists.read_many([fl("v"), fg("u")])
        replay.update_lists(recorded)
        assert live.lists.read(fl("v")) == {"w"}
        assert live.lists.read(fg("u")) == frozenset()
        live.apply([follow("u", "v", 30 + rebuild_between)])  # for the next round
        live.apply([unfollow("u", "v", 40 + rebuild_between)])


@pytest.mark.parametrize("how", ["retry after the store step", "redelivery after a crash"])
def test_user_removed_is_idempotent(appliers: tuple[GraphApplier, GraphApplier], how: str) -> None:
    """A second attempt must still find the neighbours the first switched off."""
    a, _ = appliers
    a.apply([follow("r", "v1", 1), follow("r", "v2", 2), follow("f1", "r", 3)])
    refs = [fl("v1"), fl("v2"), fg("f1"), fg("r"), fl("r")]
    a.lists.read_many(refs)
    a.record([removed("r", 100)])  # first attempt: store step only, then it failed or died
    if how == "retry after the store step":
        a.update_lists(a.record([removed("r", 100)]))
    else:
        a.apply([removed("r", 100)])
    got = a.lists.read_many(refs)
    assert got == {
        fl("v1"): set(),
        fl("v2"): set(),
        fg("f1"): set(),
        fg("r"): set(),
        fl("r"): set(),
    }


def test_a_removal_costs_a_celebrity_list_one_token_not_a_rebuild(
    appliers: tuple[GraphApplier, GraphApplier],
) -> None:
    """Neighbours' lists get ``-user``; only the removed user's own lists are dropped."""
    a, _ = appliers
    fans = [f"fan{i}" for i in range(200)]
    a.apply([follow(f, "celeb", i) for i, f in enumerate(fans)])
    assert a.lists.read(fl("celeb")) == set(fans)
    rebuilds = a.lists.stats.rebuilds
    for i in range(5):
        a.apply([removed(fans[i], 1000 + i)])
    assert a.lists.read(fl("celeb")) == set(fans[5:])
    assert a.lists.stats.rebuilds == rebuilds  # no rebuild of the celebrity's list


def test_an_addition_confirmed_against_a_newer_removal_in_the_store(
    appliers: tuple[GraphApplier, GraphApplier],
) -> None:
    """The confirmation step on its own: an addition whose edge the store holds switched off at
    a newer position gets that removal appended after it."""
    a, _ = appliers
    a.lists.read_many([fl("v"), fg("u")])
    a.store.apply([EdgeChange("u", "v", True, 5), EdgeChange("u", "v", False, 9)])
    assert a._confirm([EdgeChange("u", "v", True, 5)]) == 1
    assert a.lists.read(fl("v")) == frozenset() == a.lists.read(fg("u"))
    assert a._confirm([EdgeChange("u", "v", True, 10)]) == 0  # newer than the store: nothing


def test_a_follow_backfills_the_followers_cached_timeline(
    appliers: tuple[GraphApplier, GraphApplier], cache: MemcacheCluster, unique: str
) -> None:
    """A timeline is the newest posts of the authors followed now: after a follow, the new
    followee's older posts show, although the timeline was cached (and so not regenerated)."""
    a, _ = appliers
    store = a.store
    store.store_posts([PostRecord("author", "p1", 1000), PostRecord("other", "p2", 2000)])
    settings = ListSettings(namespace=unique, max_members=50, compact_write_prob=0)
    timelines = TokenLists(CappedLayout, cache, TimelineSource(store, 50), settings)
    reader = TimelineReader(store, a.lists, timelines, 50)
    a.apply([follow("f", "other", 1)])
    assert [e.post_id for e in reader.read("f")] == ["p2"]  # cached now
    a.apply([follow("f", "author", 2)])
    assert [e.post_id for e in reader.read("f")] == ["p2", "p1"]
    a.apply([unfollow("f", "other", 3)])
    assert [e.post_id for e in reader.read("f")] == ["p1"]
