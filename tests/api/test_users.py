"""Follower and following lists over the cached lists, and the point query from the store."""

from __future__ import annotations

from starlette.testclient import TestClient

from tests.api.conftest import Graph


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


def test_a_forged_member_cursor_is_a_400(client: TestClient, graph: Graph) -> None:
    graph.follow("a", "b")
    for cursor in ("!!!", "aGVsbG8gd29ybGQ", "YQ=="):  # not base64url, "hello world", padded
        response = client.get("/v1/users/b/followers", params={"cursor": cursor})
        assert response.status_code == 400, cursor
        assert response.json()["errors"][0]["field"] == "cursor"


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
