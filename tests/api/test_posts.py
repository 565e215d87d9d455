"""An author's posts with their texts (``GET /v1/users/{user}/posts``), from the edge store."""

from __future__ import annotations

from starlette.testclient import TestClient

from tests.api.conftest import SECRET, Graph, api_client, bearer, hs256
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph.model.edges import PostRecord


def test_an_authors_pages_are_newest_first_with_texts_and_cover_every_post_once(
    client: TestClient, graph: Graph
) -> None:
    posts = [
        PostRecord("ann", f"p{i:02d}", 1_700_000_000_000 + i // 2, f"text {i}") for i in range(11)
    ]
    graph.store.store_posts([*posts, PostRecord("bob", "p99", 1_800_000_000_000, "not ann's")])
    shown, cursor = [], None
    while True:
        params = {"limit": 4} | ({"cursor": cursor} if cursor else {})
        body = client.get("/v1/users/ann/posts", params=params).json()
        assert body["user"] == "ann" and len(body["posts"]) <= 4
        shown += body["posts"]
        cursor = body["next"]
        if cursor is None:
            break
    expected = sorted(posts, key=lambda p: (p.ts, p.post_id), reverse=True)
    assert shown == [
        {"post_id": p.post_id, "author": "ann", "ts": p.ts, "text": p.text} for p in expected
    ]


def test_no_posts_is_an_empty_page_and_a_stranger_a_404(client: TestClient, graph: Graph) -> None:
    graph.follow("a", "b")
    assert client.get("/v1/users/a/posts").json() == {"user": "a", "posts": [], "next": None}
    assert client.get("/v1/users/nobody/posts").status_code == 404


def test_a_malformed_cursor_is_a_400_and_any_well_formed_one_a_place(
    client: TestClient, graph: Graph
) -> None:
    first = graph.post("ann", "p1", ago_ms=10)
    graph.post("ann", "p3")
    for cursor in ("garbage", f"{first.ts}!ann", "1!ann!p1", f"{first.ts:013d}!ann!p 1"):
        response = client.get("/v1/users/ann/posts", params={"cursor": cursor})
        assert response.status_code == 400, cursor
        assert response.json()["errors"][0]["field"] == "cursor"
    for author in ("ann", "bob"):  # a time and a post id: a place whoever the author
        cursor = f"{first.ts:013d}!{author}!p2"
        shown = client.get("/v1/users/ann/posts", params={"cursor": cursor}).json()["posts"]
        assert [p["post_id"] for p in shown] == ["p1"]


def test_posts_are_public_unless_lists_are_private(settings: Settings, graph: Graph) -> None:
    graph.post("ann", "p1")
    with api_client(settings, jwt_secret=SECRET) as client:
        assert client.get("/v1/users/ann/posts").status_code == 200
    with api_client(settings, jwt_secret=SECRET, private_lists=True) as client:
        assert client.get("/v1/users/ann/posts").status_code == 401
        token = bearer(hs256("anyone"))
        assert client.get("/v1/users/ann/posts", headers=token).status_code == 200
