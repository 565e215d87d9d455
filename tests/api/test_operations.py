"""Health, readiness, metrics, the OpenAPI document, and failures: 503 with Retry-After while
memcached is unreachable, a problem (never a traceback) for anything unexpected."""

from __future__ import annotations

import sqlite3
from typing import Any

import jsonschema
import orjson
import pytest
from starlette.testclient import TestClient

from tests.api.conftest import Graph, api_client
from tests.conftest import Refused
from timeline_fanout.api.app import create_app
from timeline_fanout.api.backends import Backends
from timeline_fanout.api.openapi import DOCUMENT, document
from timeline_fanout.api.settings import ApiSettings
from timeline_fanout.cli.settings import Settings


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"memcached": "ok", "edge_store": "ok", "kafka": "ok"}


def test_memcached_down_is_gone_around_to_the_store_and_not_ready(
    settings: Settings, graph: Graph, refused: Refused
) -> None:
    """No server answers: reads are answered exactly from the edge store (a 503 only where no
    exact answer can be given), and the replica says it is not ready."""
    graph.follow("alice", "bob")
    down = settings.model_copy(update={"memcached": str(refused)})
    with api_client(down, retry_after_s=7) as client:
        response = client.get("/v1/timelines/alice")
        assert response.status_code == 200 and response.json()["posts"] == []
        assert client.get("/v1/users/bob/followers").json()["members"] == ["alice"]
        assert client.get("/v1/users/alice/following/bob").json() == {"following": True}
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.headers["retry-after"] == "7"
        checks = ready.json()["checks"]
        assert checks == {
            "memcached": "failed (see the server's log)",
            "edge_store": "ok",
            "kafka": "ok",
        }
        assert client.get("/healthz").status_code == 200


def test_readyz_says_what_failed_and_never_where(
    settings: Settings, refused: Refused, caplog: pytest.LogCaptureFixture
) -> None:
    """Public: no address, port, path or topology reaches the body; the log has them."""
    port = refused.pair[1]
    down = settings.model_copy(update={"memcached": str(refused)})
    with api_client(down) as client:
        ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["checks"]["memcached"] == "failed (see the server's log)"
    for secret in (str(port), "127.0.0.1", "refused", "Error", "Unavailable"):
        assert secret not in ready.text, secret
    assert str(port) in caplog.text  # the operator's log says where


def failing_backends(exc: Exception) -> Any:
    def opened() -> Backends:
        raise exc

    return opened


def test_store_failures_are_503_when_transient_and_500_otherwise() -> None:
    cases = [
        (sqlite3.OperationalError("database is locked"), 503),
        (sqlite3.DatabaseError("file is not a database"), 500),
        (RuntimeError("a bug /home/secret/path"), 500),
    ]
    for exc, status in cases:
        app = create_app(ApiSettings(threads=1), failing_backends(exc))
        with TestClient(app, raise_server_exceptions=False) as client:
            response = client.get("/v1/timelines/u1")
        assert response.status_code == status, exc
        assert response.headers["content-type"] == "application/problem+json"
        assert "Traceback" not in response.text and "secret" not in response.text
        assert ("retry-after" in response.headers) == (status == 503)


def test_metrics_count_by_route_template_and_status(client: TestClient, graph: Graph) -> None:
    graph.follow("alice", "bob")
    client.get("/v1/timelines/alice")
    client.get("/v1/timelines/bob")
    client.get("/v1/timelines/ghost")
    client.get("/no/such/route")
    text = client.get("/metrics").text
    route = 'method="GET",route="/v1/timelines/{user}"'
    assert f'fanout_api_responses_total{{{route},status="200"}} 2.0' in text
    assert f'fanout_api_responses_total{{{route},status="404"}} 1.0' in text
    assert f"fanout_api_request_seconds_count{{{route}}} 3.0" in text
    assert 'route="unmatched",status="404"' in text
    assert "/v1/timelines/alice" not in text  # templates, never raw paths
    assert "fanout_api_requests_in_flight 1.0" in text  # this very request


def test_the_checked_in_openapi_document_is_what_the_app_serves(client: TestClient) -> None:
    checked_in = orjson.loads(DOCUMENT.read_bytes())
    assert document() == checked_in, "regenerate with: python -m api.openapi"
    assert client.get("/openapi.json").json() == checked_in
    routes = {(r.path, m) for r in client.app.routes for m in r.methods if m != "HEAD"}  # type: ignore[attr-defined]
    documented = {(p, m.upper()) for p, ops in checked_in["paths"].items() for m in ops}
    assert routes == documented


def test_responses_match_their_documented_schemas(client: TestClient, graph: Graph) -> None:
    doc = orjson.loads(DOCUMENT.read_bytes())
    graph.follow("alice", "bob")
    graph.post("bob", "p1")
    calls = [
        ("get", "/v1/timelines/alice", None),
        ("get", "/v1/timelines/ghost", None),
        ("get", "/v1/timelines/alice?limit=0", None),
        ("get", "/v1/users/bob/followers", None),
        ("get", "/v1/users/alice/following", None),
        ("get", "/v1/users/alice/following/bob", None),
        ("post", "/v1/events", [{"type": "follow", "follower": "a", "followee": "b"}]),
        ("post", "/v1/events", [{"type": "follow"}]),
        ("get", "/healthz", None),
        ("get", "/readyz", None),
    ]
    for method, url, body in calls:
        response = client.request(method, url, json=body)
        path = url.split("?")[0]
        template = next(p for p in doc["paths"] if _matches(p, path) and method in doc["paths"][p])
        documented = doc["paths"][template][method]["responses"][str(response.status_code)]
        ((media, spec),) = documented["content"].items()
        assert response.headers["content-type"] == media, url
        schema = {**spec["schema"], "components": doc["components"]}
        jsonschema.validate(response.json(), schema)


def _matches(template: str, path: str) -> bool:
    parts, wanted = template.split("/"), path.split("/")
    return len(parts) == len(wanted) and all(
        t.startswith("{") or t == w for t, w in zip(parts, wanted, strict=True)
    )


def test_public_probes_ask_the_backends_once_a_second_however_many_ask(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/readyz, /v1/stats and /metrics are public: a flood of them costs the backends and the
    event loop one round a second per process (api/recent.py), on a clock held still here."""
    from timeline_fanout.api import recent
    from timeline_fanout.api.routes import health

    now = [1000.0]
    monkeypatch.setattr(recent.time, "monotonic", lambda: now[0])
    calls: list[str] = []
    probes = {name: _counted(calls, name, probe) for name, probe in health.PROBES.items()}
    monkeypatch.setattr(health, "PROBES", probes)
    for _ in range(20):
        assert client.get("/readyz").status_code == 200
        client.get("/v1/stats")
        client.get("/metrics")
    assert sorted(calls) == ["edge_store", "kafka", "memcached"]
    first = client.get("/metrics").text
    now[0] += 1.0
    client.get("/readyz")
    assert len(calls) == 6
    assert client.get("/metrics").text != first  # rendered again: the counts moved


def _counted(calls: list[str], name: str, probe: Any) -> Any:
    def counted(*args: Any) -> None:
        calls.append(name)
        probe(*args)

    return counted
