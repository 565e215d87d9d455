"""``/metrics`` (Prometheus text format) and ``/openapi.json`` (the document of every route)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from timeline_fanout.api.context import context
from timeline_fanout.api.routing import ApiRoute, json_response


async def metrics(request: Request) -> Response:
    return context(request).metrics.exposition()


async def openapi(request: Request) -> Response:
    return json_response(context(request).openapi)


ROUTES = (
    ApiRoute(
        "/metrics",
        "GET",
        metrics,
        {
            "operationId": "metrics",
            "summary": "Prometheus metrics of this process",
            "security": [],
            "responses": {
                "200": {
                    "description": "latency per route template, requests in flight, "
                    "responses by status",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                }
            },
        },
    ),
    ApiRoute(
        "/openapi.json",
        "GET",
        openapi,
        {
            "operationId": "openapi",
            "summary": "This document",
            "security": [],
            "responses": {
                "200": {
                    "description": "OpenAPI 3.1",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                }
            },
        },
    ),
)
