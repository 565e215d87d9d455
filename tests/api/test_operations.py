"""Health, readiness, metrics, the OpenAPI document, and failures: 503 with Retry-After while
memcached is unreachable, a problem (never a traceback) for anything unexpected."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import jsonschema
import orjson
from starlette.testclient import TestClient

from api.app import create_app
from api.backends import Backends
from api.openapi import DOCUMENT, document
from api.settings import ApiSettings
from fanout.settings import Settings
from tests.api.conftest import Graph, api_client
from tests.conftest import Refused


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"memcached": "ok", "edge_store": "ok", "kafka": "ok"}


def test_memcached_down_is_503_with_retry_after_and_not_ready(
    settings: Settings, graph: Graph, refused: Refused
) -> None:
    graph.follow("alice", "bob")
    down = settings.model_copy(update={"memcached": str(refused)})
    with api_client(down, retry_after_s=7) as client:
        for url in ("/v1/timelines/alice", "/v1/users/bob/followers"):
            response = client.get(url)
            assert response.status_code == 503, url
            assert response.headers["retry-after"] == "7"
            assert response.headers["content-type"] == "application/problem+json"
            assert response.json()["type"] == "urn:fanout:problem:unavailable"
            assert "Traceback" not in response.text
        # The point query reads the store alone, so it still answers.
        assert client.get("/v1/users/alice/following/bob").json() == {"following": True}
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.headers["retry-after"] == "7"
        checks = ready.json()["checks"]
        assert checks["edge_store"] == "ok" and checks["memcached"].startswith("CacheUnavailable")
        assert client.get("/healthz").status_code == 200


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


def test_readme_documents_every_api_setting() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    for name in ApiSettings.model_fields:
        assert f"`FANOUT_API_{name.upper()}`" in readme, name
