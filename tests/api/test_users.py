"""Follower and following lists and the point query, all from the edge store."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.api.conftest import Graph
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph.lists.token_lists import TokenLists
from timeline_fanout.graph.model.edges import EdgeChange, EdgeStore
from timeline_fanout.graph.model.keys import KeySpace, ListKind
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore
from timeline_fanout.memcache.cluster import MemcacheCluster


@pytest.mark.edge_stores("sqlite", "ferretdb-collection")
def test_member_pages_are_sorted_counted_and_complete(client: TestClient, graph: Graph) -> None:
    fans = [f"fan{i:02d}" for i in range(25)]
    for fan in reversed(fans):
        graph.follow(fan, "star")
    pages, cursor = [], None
    while True:
        params = {"limit": 10} | ({"cursor": cursor} if cursor else {})
        body = client.get("/v1/users/star/followers", params=params).json()
        assert body["user"] == "star" and body["count"] == 25
        pages.append(body["members"])
        cursor = body["next"]
        if cursor is None:
            break
    assert [len(p) for p in pages] == [10, 10, 5]
    assert [m for page in pages for m in page] == fans
    following = client.get("/v1/users/fan03/following").json()
    assert following == {"user": "fan03", "members": ["star"], "count": 1, "next": None}


def test_empty_lists_of_known_users_and_404_for_strangers(client: TestClient, graph: Graph) -> None:
    graph.follow("a", "b")
    assert client.get("/v1/users/a/followers").json() == {
        "user": "a",
        "members": [],
        "count": 0,
        "next": None,
    }
    assert client.get("/v1/users/b/following").json()["count"] == 0
    for kind in ("followers", "following"):
        assert client.get(f"/v1/users/nobody/{kind}").status_code == 404


def test_a_cursor_that_is_not_a_user_id_is_a_400_and_any_id_is_a_place(
    client: TestClient, graph: Graph
) -> None:
    graph.follow("a", "b")
    graph.follow("c", "b")
    for cursor in ("!!!", "YQ==", "x" * 65, "a b"):
        response = client.get("/v1/users/b/followers", params={"cursor": cursor})
        assert response.status_code == 400, cursor
        assert response.json()["errors"][0]["field"] == "cursor"
    for cursor, members in (("0", ["a", "c"]), ("aa", ["c"]), ("zz", [])):
        body = client.get("/v1/users/b/followers", params={"cursor": cursor}).json()
        assert (body["members"], body["count"], body["next"]) == (members, 2, None), cursor


def test_a_page_reads_its_own_range_of_the_store_and_nothing_of_the_whole_list(
    client: TestClient, store: EdgeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither the cached list nor a snapshot of it is read, whatever the list's size: the
    store is asked for the page (``limit`` + 1 members past the cursor) and the kept count."""
    fans = [f"f{i:05d}" for i in range(3000)]
    store.apply([EdgeChange(f, "star", True, i) for i, f in enumerate(fans)])
    store.apply([EdgeChange("star", f, True, 5000 + i) for i, f in enumerate(fans[:1500])])
    asked: list[int] = []
    page = SqliteEdgeStore._page

    def recorded(self: SqliteEdgeStore, *args: Any) -> list[str]:
        asked.append(args[-1])
        return page(self, *args)

    def whole_list(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("a page read a whole list")

    monkeypatch.setattr(SqliteEdgeStore, "_page", recorded)
    monkeypatch.setattr(SqliteEdgeStore, "snapshot", whole_list)
    monkeypatch.setattr(TokenLists, "read_many", whole_list)
    for kind, count in (("followers", 3000), ("following", 1500)):
        body = client.get(f"/v1/users/star/{kind}", params={"limit": 1}).json()
        assert (body["members"], body["count"], body["next"]) == (["f00000"], count, "f00000")
        body = client.get(f"/v1/users/star/{kind}", params={"limit": 2, "cursor": "f01200"})
        assert body.json()["members"] == ["f01201", "f01202"]
    assert asked == [2, 3, 2, 3]


@pytest.mark.edge_stores("sqlite", "ferretdb-collection")
def test_reads_of_unknown_users_leave_nothing_in_memcached(
    client: TestClient, settings: Settings, cache: MemcacheCluster, graph: Graph
) -> None:
    graph.follow("a", "b")
    ghosts = [f"ghost{i}" for i in range(20)]
    for ghost in ghosts:
        for kind in ("followers", "following"):
            assert client.get(f"/v1/users/{ghost}/{kind}").status_code == 404
            page = client.get(f"/v1/users/{ghost}/{kind}", params={"cursor": "m", "limit": 1})
            assert page.status_code == 404
        assert client.get(f"/v1/users/{ghost}/following/a").status_code == 404
    assert client.get("/v1/users/a/followers").json()["count"] == 0  # known, and empty
    assert client.get("/v1/users/a/followers", params={"cursor": "m"}).json()["count"] == 0
    keys = KeySpace(settings.cache_prefix)
    for kind in ListKind:
        assert cache.get_many(keys.list_keys(kind, [*ghosts, "a", "b"])) == {}
    assert cache.get_many(keys.count_keys([*ghosts, "a", "b"])) == {}


def test_is_following_answers_from_the_store_and_names_unknown_users(
    client: TestClient, graph: Graph
) -> None:
    graph.follow("a", "b")
    graph.follow("c", "d")
    graph.unfollow("c", "d")
    assert client.get("/v1/users/a/following/b").json() == {"following": True}
    assert client.get("/v1/users/b/following/a").json() == {"following": False}
    assert client.get("/v1/users/c/following/d").json() == {"following": False}
    response = client.get("/v1/users/a/following/ghost")
    assert response.status_code == 404
    assert [e["field"] for e in response.json()["errors"]] == ["b"]
    response = client.get("/v1/users/ghost1/following/ghost2")
    assert [e["field"] for e in response.json()["errors"]] == ["a", "b"]
