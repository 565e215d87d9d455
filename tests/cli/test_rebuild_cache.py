"""`fanout rebuild-cache` rewrites lists from the edge store: the repair for a wrong list."""

from __future__ import annotations

from tests.conftest import run_cli
from timeline_fanout.cli import wiring
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph import EdgeChange, ListKind, ListRef


def test_rebuild_cache_repairs_a_wrong_list(settings: Settings) -> None:
    store = wiring.edge_store(settings)
    store.apply([EdgeChange("a", "star", True, 1), EdgeChange("b", "star", True, 2)])
    lists = wiring.list_store(settings, store)
    star = ListRef(ListKind.FOLLOWERS, "star")
    assert lists.read(star) == {"a", "b"}
    lists.apply({star: [(True, "zombie", 9), (False, "a", 9)]})  # tokens the store never had
    assert lists.read(star) == {"b", "zombie"}

    done = run_cli(settings, "rebuild-cache", "star")
    assert done.returncode == 0, done.stderr.decode()
    assert lists.read(star) == {"a", "b"}
    everyone = run_cli(settings, "rebuild-cache")  # all users known to the store
    assert everyone.returncode == 0 and b"rebuilt the lists of 3 users" in everyone.stderr
    assert lists.read(ListRef(ListKind.FOLLOWING, "a")) == {"star"}
