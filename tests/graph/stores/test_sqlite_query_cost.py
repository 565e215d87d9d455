"""What the SQLite store's per-request queries cost, counted in SQLite VM instructions (the
progress handler), not in time: deterministic, and it shows a query that steps over rows
instead of seeking to them whatever the machine's speed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from timeline_fanout.graph.model.edges import EdgeChange
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore

INACTIVE = 5000


def instructions(store: SqliteEdgeStore, query: Callable[[], object]) -> int:
    """VM instructions ``query`` runs, in steps of 10."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    store._db.set_progress_handler(count, 10)
    try:
        query()
    finally:
        store._db.set_progress_handler(None, 10)
    return steps * 10


def test_knowing_a_user_costs_the_same_however_many_followers_left_it(tmp_path: Path) -> None:
    """A user whose followers all unfollowed (or who was removed) is answered from the index
    of active edges, not by stepping over each inactive follower."""
    store = SqliteEdgeStore(tmp_path / "edges.db")
    store.apply([EdgeChange(f"f{i}", "left", True, i) for i in range(INACTIVE)])
    store.apply([EdgeChange(f"f{i}", "left", False, INACTIVE + i) for i in range(INACTIVE)])
    store.apply([EdgeChange("a", "small", True, 1), EdgeChange("a", "small", False, 2)])
    assert store.known_users(["left"]) == {"left"} == store.known_users(["left", "nobody"])
    left = instructions(store, lambda: store.known_users(["left"]))
    small = instructions(store, lambda: store.known_users(["small"]))
    assert left <= 2 * small + 50, (left, small)
    store.close()
