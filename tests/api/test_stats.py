"""GET /v1/stats: the consumer groups' lag and committed offsets, read from the broker while
the consumers are elsewhere."""

from __future__ import annotations

import time
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.api.conftest import SECRET, api_client, bearer, hs256
from tests.api.live import consume, publish
from timeline_fanout.cli.settings import Settings


def by_consumer(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["consumer"]: c for c in body["consumers"]}


def taken_after(client: TestClient, ms: int) -> dict[str, Any]:
    """The first snapshot taken at ``ms`` or later (one is answered again for a second)."""
    deadline = time.monotonic() + 10
    while (body := client.get("/v1/stats").json())["at"] < ms:
        assert time.monotonic() < deadline, body
        time.sleep(0.1)
    return body


@pytest.mark.apache_kafka
def test_lag_shows_unapplied_events_and_drops_to_zero_once_consumed(
    client: TestClient, settings: Settings
) -> None:
    before = by_consumer(client.get("/v1/stats").json())
    assert set(before) == {"graph", "fanout"}
    assert before["graph"]["group"] == f"{settings.group}.graph"
    assert [t["topic"] for t in before["fanout"]["topics"]] == [
        settings.topics.posts,
        settings.topics.fanout_tasks,
    ]
    assert before["graph"]["lag"] == before["graph"]["committed"] == 0

    events = [{"type": "follow", "follower": f"f{i}", "followee": "star"} for i in range(40)]
    publish(settings, [*events, {"type": "post", "author": "star", "post_id": "p1"}])
    waiting = by_consumer(taken_after(client, int(time.time() * 1000)))
    # Exact: the high watermarks are the log ends (no group has committed yet).
    assert waiting["graph"]["lag"] == 40 and waiting["fanout"]["lag"] == 1

    consume(settings, graph=40, posts=1)
    body = taken_after(client, int(time.time() * 1000))
    done = by_consumer(body)
    assert done["graph"]["lag"] == 0 and done["fanout"]["lag"] == 0
    assert done["graph"]["committed"] == 40  # every follow applied and committed
    assert done["fanout"]["committed"] >= 1
    assert body["at"] > 0


def test_stats_are_private_with_the_lists(settings: Settings) -> None:
    with api_client(settings, jwt_secret=SECRET, private_lists=True) as client:
        assert client.get("/v1/stats").status_code == 401
        assert client.get("/v1/stats", headers=bearer(hs256("anyone"))).status_code == 200


def test_an_unreachable_broker_is_a_503_with_retry_after(settings: Settings) -> None:
    gone = settings.model_copy(update={"kafka": "127.0.0.1:9"})
    with api_client(gone, ready_timeout_s=0.5) as client:
        response = client.get("/v1/stats")
    assert response.status_code == 503
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["retry-after"] == "2"
