"""POST /v1/events: the publisher's validation, problems naming index/field/rule, and events
that travel through Kafka and the consumers into timelines read back over the API."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import orjson
from httpx2 import Response
from starlette.testclient import TestClient

from tests.api.conftest import SECRET, Graph, api_client, bearer, hs256
from tests.conftest import Refused, settings_env
from tests.kafka_helpers import read_topic
from timeline_fanout.cli.settings import Settings
from timeline_fanout.schemas import PostDeleted, decode_event


def problem(response: Response) -> Any:
    assert response.headers["content-type"] == "application/problem+json"
    return response.json()


def test_invalid_events_name_index_field_and_rule_and_nothing_is_sent(
    client: TestClient, settings: Settings
) -> None:
    good = {"type": "follow", "follower": "a", "followee": "b"}
    batch = [
        good,
        {"type": "follow", "follower": "a b", "followee": "c"},
        {"type": "post", "author": "a", "post_id": "p1", "colour": "red"},
        {
            "type": "fanout_task",
            "author": "a",
            "post_id": "p",
            "post_ts": 1,
            "chunk": 0,
            "followers": ["b"],
        },
        {"type": "shout"},
        "not an object",
    ]
    response = client.post("/v1/events", json=batch)
    assert response.status_code == 422
    body = problem(response)
    assert body["type"] == "urn:fanout:problem:invalid-events"
    errors = {e["index"]: e for e in body["errors"]}
    assert sorted(errors) == [1, 2, 3, 4, 5]
    assert errors[1]["field"] == "follower" and "A-Za-z0-9" in errors[1]["rule"]
    assert errors[2]["field"] == "colour"
    assert errors[3]["field"] == "type" and "internal" in errors[3]["rule"]
    assert errors[4]["field"] == "type"
    single = client.post("/v1/events", json={"type": "post", "author": "a"})
    assert problem(single)["errors"] == [{"field": "post_id", "rule": "Field required"}]
    # Nothing of the rejected batch reached the topic (the good event included).
    assert read_topic(settings.kafka, settings.topics.graph, 1, timeout=2) == []


def test_follows_past_the_cap_are_refused_counting_the_store_and_the_batch(
    settings: Settings, graph: Graph
) -> None:
    """With a cap of 3: a user following 2 may follow 1 more, not 2; others are unaffected;
    nothing of a refused batch is sent."""
    graph.follow("busy", "a", "b")
    with api_client(settings, max_following=3) as client:
        over = [
            {"type": "follow", "follower": "busy", "followee": "c"},
            {"type": "follow", "follower": "calm", "followee": "c"},
            {"type": "follow", "follower": "busy", "followee": "d"},
        ]
        response = client.post("/v1/events", json=over)
        assert response.status_code == 422
        assert problem(response)["errors"] == [
            {"field": "follower", "rule": "a user follows at most 3 users", "index": 2}
        ]
        assert read_topic(settings.kafka, settings.topics.graph, 1, timeout=2) == []
        assert client.post("/v1/events", json=over[:2]).status_code == 202


def test_a_problem_shows_unknown_field_names_cut_short(client: TestClient) -> None:
    """Field names are the client's text: a problem echoes at most 64 characters of each, so a
    1000-event batch of 16 KiB unknown names answers in a few hundred KiB, not 16 MiB."""
    name = "x" * (16 << 10)
    batch = [{"type": "follow", "follower": "a", "followee": "b", name: i} for i in range(1000)]
    response = client.post("/v1/events", json=batch)
    assert response.status_code == 422
    errors = problem(response)["errors"]
    assert len(errors) == 1000
    assert {e["field"] for e in errors} == {"x" * 63 + "…"}
    assert len(response.content) < 200_000


def test_malformed_bodies(client: TestClient) -> None:
    assert (
        client.post(
            "/v1/events", content=b"{", headers={"content-type": "application/json"}
        ).status_code
        == 400
    )
    assert (
        client.post("/v1/events", content=b"{}", headers={"content-type": "text/plain"}).status_code
        == 415
    )
    assert client.post("/v1/events", json=[]).status_code == 422
    too_many = [{"type": "follow", "follower": "a", "followee": "b"}] * 1001
    response = client.post("/v1/events", json=too_many)
    assert response.status_code == 422 and "1000" in problem(response)["detail"]


def consume_both(settings: Settings) -> None:
    """Both consumers at once, as separate processes: the order they apply in does not matter
    to a reader (a timeline not in the cache is regenerated from the store on its next read)."""
    # The dev broker's first group join waits one poll interval: keep it short here.
    env = settings_env(settings.model_copy(update={"max_poll_interval_ms": 6000}))
    running = [
        subprocess.Popen(
            [sys.executable, "-m", "timeline_fanout", "consume", which, "--until-idle", "2"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for which in ("graph", "fanout")
    ]
    for process in running:
        _, err = process.communicate(timeout=120)
        assert process.returncode == 0, err.decode()


def test_published_events_are_acknowledged_consumed_and_shown(
    client: TestClient, settings: Settings
) -> None:
    events = [
        {"type": "follow", "follower": "reader", "followee": "writer"},
        {"type": "follow", "follower": "other", "followee": "writer"},
        {
            "type": "post",
            "author": "writer",
            "post_id": "hello",
            "ts": 1_700_000_000_000,
            "text": "hi",
        },
    ]
    response = client.post("/v1/events", json=events)
    assert response.status_code == 202
    ids = response.json()["event_ids"]
    assert len(ids) == 3 and len(set(ids)) == 3
    sent = [decode_event(m.value()) for m in read_topic(settings.kafka, settings.topics.graph, 2)]
    sent += [decode_event(m.value()) for m in read_topic(settings.kafka, settings.topics.posts, 1)]
    assert sorted(e.event_id for e in sent) == sorted(ids)  # type: ignore[type-var]
    consume_both(settings)
    timeline = client.get("/v1/timelines/reader").json()
    assert timeline["posts"] == [
        {"post_id": "hello", "author": "writer", "ts": 1_700_000_000_000, "text": "hi"}
    ]
    followers = client.get("/v1/users/writer/followers").json()
    assert followers["members"] == ["other", "reader"] and followers["count"] == 2


def test_an_unreachable_broker_is_a_503_naming_the_events(
    settings: Settings, refused: Refused
) -> None:
    down = settings.model_copy(update={"kafka": str(refused)})
    with api_client(down, publish_timeout_s=1.0) as client:
        event = {"type": "follow", "follower": "a", "followee": "b", "event_id": "e-1"}
        response = client.post("/v1/events", json=[event])
    assert response.status_code == 503 and response.headers["retry-after"]
    body = problem(response)
    assert body["failed"][0]["index"] == 0 and body["failed"][0]["event_id"] == "e-1"
    assert orjson.dumps(body)  # a plain JSON document, no traceback


def deletion(author: str, post_id: str) -> dict[str, str]:
    return {"type": "post_deleted", "author": author, "post_id": post_id}


def test_a_post_is_deleted_by_its_author_or_a_publish_all_token(settings: Settings) -> None:
    """Each deletion goes to the posts topic keyed by its author, as a post does."""
    own = bearer(hs256("alice", "fanout:publish"))
    backend = bearer(hs256("app", "fanout:publish fanout:publish-all"))
    with api_client(settings, jwt_secret=SECRET) as client:
        mine = client.post("/v1/events", json=deletion("alice", "a1"), headers=own)
        assert mine.status_code == 202
        for_bob = client.post("/v1/events", json=[deletion("bob", "b1")], headers=backend)
        assert for_bob.status_code == 202
    sent = read_topic(settings.kafka, settings.topics.posts, 2)
    decoded = [(m.key(), decode_event(m.value())) for m in sent]
    deleted = sorted((k, e.author, e.post_id) for k, e in decoded if isinstance(e, PostDeleted))
    assert deleted == [(b"alice", "alice", "a1"), (b"bob", "bob", "b1")]


def test_deleting_another_users_post_is_refused_and_nothing_is_sent(settings: Settings) -> None:
    own = bearer(hs256("alice", "fanout:publish"))
    batch = [deletion("alice", "a1"), deletion("bob", "b1")]
    with api_client(settings, jwt_secret=SECRET) as client:
        response = client.post("/v1/events", json=batch, headers=own)
    assert response.status_code == 403
    body = problem(response)
    assert body["type"] == "urn:fanout:problem:forbidden" and body["indexes"] == [1]
    assert "the author of a post or of a deleted post" in body["detail"]
    assert "fanout:publish-all" in body["detail"]
    assert read_topic(settings.kafka, settings.topics.posts, 1, timeout=2) == []
