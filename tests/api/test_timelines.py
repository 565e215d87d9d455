"""GET /v1/timelines/{user}: pages through TimelineReader.page, 404 vs empty, parameter rules."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from starlette.testclient import TestClient

from tests.api.conftest import Graph, api_client
from timeline_fanout.api.backends import Backends
from timeline_fanout.api.context import ApiContext
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph.model.keys import KeySpace, ListKind
from timeline_fanout.memcache.cluster import MemcacheCluster

PROBLEM = "application/problem+json"


def test_pages_follow_the_cursor_to_the_end_newest_first(client: TestClient, graph: Graph) -> None:
    graph.follow("reader", "ann", "bob")
    posts = [graph.post("ann" if i % 2 else "bob", f"p{i}", ago_ms=1000 * i) for i in range(7)]
    seen, cursor, sizes = [], None, []
    while True:
        query = {"limit": 3} | ({"cursor": cursor} if cursor else {})
        response = client.get("/v1/timelines/reader", params=query)
        assert (
            response.status_code == 200 and response.headers["content-type"] == "application/json"
        )
        body = response.json()
        assert body["user"] == "reader"
        sizes.append(len(body["posts"]))
        seen += body["posts"]
        cursor = body["next"]
        if cursor is None:
            break
    assert sizes == [3, 3, 1]
    expected = [
        {"post_id": p.post_id, "author": p.author, "ts": p.ts, "text": p.text} for p in posts
    ]
    assert seen == expected  # posts[0] is the newest


def test_a_known_user_with_nothing_is_an_empty_page_and_a_stranger_is_404(
    client: TestClient, graph: Graph
) -> None:
    graph.follow("lonely", "quiet")  # follows someone who never posted
    graph.follow("former", "ann")
    graph.unfollow("former", "ann")  # only an inactive edge left: still known
    for user in ("lonely", "quiet", "former"):
        response = client.get(f"/v1/timelines/{user}")
        assert response.status_code == 200, user
        assert response.json() == {"user": user, "posts": [], "next": None}
    response = client.get("/v1/timelines/stranger")
    assert response.status_code == 404
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert body["type"] == "urn:fanout:problem:unknown-user" and body["status"] == 404
    assert body["errors"] == [
        {"field": "user", "rule": "a user with an edge or a post, not removed"}
    ]


def test_a_removed_user_is_unknown(client: TestClient, graph: Graph) -> None:
    graph.follow("leaver", "ann")
    graph.post("leaver", "p1")
    graph.store.remove_user("leaver", 10_000)
    assert client.get("/v1/timelines/leaver").status_code == 404
    assert client.get("/v1/users/leaver/followers").status_code == 404


def test_broken_parameters_name_the_field_and_the_rule(client: TestClient, graph: Graph) -> None:
    graph.follow("reader", "ann")
    cases = {
        "/v1/timelines/reader?limit=0": "limit",
        "/v1/timelines/reader?limit=abc": "limit",
        "/v1/timelines/reader?limit=1001": "limit",
        "/v1/timelines/reader?limit=99999999999999999999999": "limit",
        "/v1/timelines/reader?cursor=bm90LWEtY3Vyc29y": "cursor",
        "/v1/timelines/reader?cursor=%FF%FE": "cursor",
        "/v1/timelines/bad%20id": "user",
        "/v1/timelines/" + "x" * 65: "user",
    }
    for url, field in cases.items():
        response = client.get(url)
        assert response.status_code == 400, url
        assert response.headers["content-type"] == PROBLEM
        body = response.json()
        assert body["type"] == "urn:fanout:problem:invalid-request"
        assert [e["field"] for e in body["errors"]] == [field], url
        assert body["errors"][0]["rule"] and field in body["detail"]


def test_unknown_routes_and_methods_are_problems_too(client: TestClient) -> None:
    missing = client.get("/v1/nothing-here")
    assert missing.status_code == 404 and missing.headers["content-type"] == PROBLEM
    assert missing.json()["type"] == "urn:fanout:problem:not-found"
    wrong = client.delete("/v1/timelines/u1")
    assert wrong.status_code == 405 and wrong.headers["content-type"] == PROBLEM


def hold_the_thread(client: TestClient) -> tuple[Future[None], threading.Event]:
    """Holds the client's one backend thread until the event is set (or 10 s pass: a read
    the loop cannot answer waits that long, then fails); returns once it is held."""
    api: ApiContext = client.app.state.api  # type: ignore[attr-defined]
    assert client.portal is not None
    holding, release = threading.Event(), threading.Event()

    def hold(_backends: Backends) -> None:
        holding.set()
        release.wait(10)

    held = client.portal.start_task_soon(api.pool.run, hold)
    assert holding.wait(10)
    return held, release


def test_a_warm_read_is_answered_on_the_loop_while_every_backend_thread_is_busy(
    settings: Settings, graph: Graph
) -> None:
    """The one backend thread is held; a warm read is still answered (from the event loop),
    while a first-ever read and an empty page (both need the thread) wait for it and then
    are answered as always."""
    graph.follow("reader", "ann", "bob")
    graph.follow("newcomer", "ann")
    graph.follow("lonely", "quiet")
    posts = [graph.post("ann" if i % 2 else "bob", f"p{i}", ago_ms=1000 * i) for i in range(5)]
    expected = [
        {"post_id": p.post_id, "author": p.author, "ts": p.ts, "text": p.text} for p in posts
    ]
    with api_client(settings, threads=1) as client:
        assert client.get("/v1/timelines/reader").json()["posts"] == expected  # cold: the pool
        held, release = hold_the_thread(client)
        try:
            page = client.get("/v1/timelines/reader", params={"limit": 2})
            assert page.status_code == 200 and page.json()["posts"] == expected[:2]
            cursor = page.json()["next"]
            rest = client.get("/v1/timelines/reader", params={"cursor": cursor})
            assert rest.json() == {"user": "reader", "posts": expected[2:], "next": None}
            assert not held.done()  # the thread was busy all along

            with ThreadPoolExecutor(2) as requests:
                first = requests.submit(client.get, "/v1/timelines/newcomer")
                empty = requests.submit(client.get, "/v1/timelines/lonely")
                time.sleep(0.2)
                assert not first.done() and not empty.done()  # queued for the thread
                release.set()
                first_body, empty_body = first.result(10).json(), empty.result(10).json()
        finally:
            release.set()
        held.result(10)
    assert first_body["posts"] == [e for e in expected if e["author"] == "ann"]
    assert empty_body == {"user": "lonely", "posts": [], "next": None}


def test_an_empty_page_of_a_user_who_follows_someone_is_answered_on_the_loop(
    settings: Settings, graph: Graph
) -> None:
    """Following someone makes a user known, so a warm empty page needs neither the store nor
    a backend thread (one following 50k users cost the thread a 30 ms decode per read)."""
    graph.follow("lonely", *(f"quiet{i}" for i in range(1000)))
    graph.follow("nobody", "x")
    graph.unfollow("nobody", "x")  # known, following no one
    with api_client(settings, threads=1) as client:
        for user in ("lonely", "nobody"):  # cold: the pool builds the lists
            assert client.get(f"/v1/timelines/{user}").json()["posts"] == []
        held, release = hold_the_thread(client)
        try:
            for _ in range(3):
                page = client.get("/v1/timelines/lonely")
                assert page.json() == {"user": "lonely", "posts": [], "next": None}
            with ThreadPoolExecutor(1) as requests:
                nobody = requests.submit(client.get, "/v1/timelines/nobody")
                time.sleep(0.2)
                assert not nobody.done()  # following no one: the store must tell
                assert not held.done()
                release.set()
                assert nobody.result(10).json()["posts"] == []
        finally:
            release.set()
        held.result(10)


def test_reads_of_unknown_users_timelines_leave_nothing_in_memcached(
    client: TestClient, settings: Settings, cache: MemcacheCluster, graph: Graph
) -> None:
    """A read that misses the cache may build the user's following list and timeline; an
    unknown user's must not (its 404 comes from one store lookup first)."""
    graph.follow("a", "b")
    ghosts = [f"ghost{i}" for i in range(20)]
    for ghost in ghosts:
        assert client.get(f"/v1/timelines/{ghost}").status_code == 404
    keys = KeySpace(settings.cache_prefix)
    for kind in ListKind:
        assert cache.get_many(keys.list_keys(kind, ghosts)) == {}
    assert client.get("/v1/timelines/a").status_code == 200  # a known one is still built
    assert cache.get_many(keys.list_keys(ListKind.FOLLOWING, ["a"])) != {}
