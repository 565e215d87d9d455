"""A list's members decoded once per change of its bytes (graph/lists/decoded.py), on the
real memcached servers of the local stack."""

from __future__ import annotations

from tests.graph.lists.contention import STAR, write
from timeline_fanout.graph import EdgeChange, ShardedLists
from timeline_fanout.graph.lists.decoded import DecodedLists
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore

MEMBERS = 3000  # some 40 KiB of tokens: above the smallest list kept decoded


def fetched(lists: ShardedLists) -> frozenset[str] | None:
    key = lists.index_key(STAR)
    head = lists.cache.gets_many([key])
    shards = lists.cache.gets_many(lists.layout.named_shards(key, head[key].value))
    return lists.layout.fetched(key, {**head, **shards})


def test_a_list_is_decoded_again_only_when_its_bytes_change(
    sqlite_store: SqliteEdgeStore, lists: ShardedLists
) -> None:
    lists.layout.decoded = DecodedLists()
    names = [f"user{i:05d}" for i in range(MEMBERS)]
    write(sqlite_store, lists, [EdgeChange(n, "star", True, i) for i, n in enumerate(names)])
    lists.read(STAR)
    decodes = lists.stats.decodes
    assert fetched(lists) == frozenset(names)
    assert fetched(lists) == fetched(lists) == frozenset(names)
    assert lists.stats.decodes == decodes + 1
    write(
        sqlite_store,
        lists,
        [
            EdgeChange("late", "star", True, MEMBERS),
            EdgeChange(names[0], "star", False, MEMBERS + 1),
        ],
    )
    assert fetched(lists) == frozenset([*names[1:], "late"])  # new bytes: decoded, not the old
    assert lists.stats.decodes == decodes + 2


def test_small_lists_are_not_kept_decoded(
    sqlite_store: SqliteEdgeStore, lists: ShardedLists
) -> None:
    lists.layout.decoded = DecodedLists()
    write(sqlite_store, lists, [EdgeChange(f"u{i}", "star", True, i) for i in range(10)])
    lists.read(STAR)
    decodes = lists.stats.decodes
    fetched(lists)
    fetched(lists)
    assert lists.stats.decodes == decodes + 2
