"""A route is declared once, with its OpenAPI operation beside it: the app's router and the
document (api/openapi.py) are both built from the same declarations, so neither can have a
route the other lacks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

Endpoint = Callable[[Request], Awaitable[Response]]
JSON = "application/json"


@dataclass(frozen=True, slots=True)
class ApiRoute:
    path: str
    method: str
    endpoint: Endpoint
    operation: dict[str, Any]  # an OpenAPI operation object

    def route(self) -> Route:
        return Route(self.path, self.endpoint, methods=[self.method])


def json_response(body: bytes, status: int = 200) -> Response:
    return Response(body, status, media_type=JSON)


def dumps(body: object) -> bytes:
    return orjson.dumps(body)


def ref(model: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model}"}


def responds(status: int, model: str, description: str) -> dict[str, Any]:
    media = "application/problem+json" if model == "ProblemBody" else JSON
    return {str(status): {"description": description, "content": {media: {"schema": ref(model)}}}}


def problems(*statuses: int) -> dict[str, Any]:
    """The problem responses an operation can return."""
    meaning = {
        400: "a parameter breaks its rule (the problem names it)",
        401: "a token is needed and missing or invalid",
        403: "the token may not do this",
        404: "unknown user",
        408: "the body did not arrive in time",
        413: "body too large",
        415: "body is not application/json",
        422: "events break their rules (each error names the index, field and rule)",
        503: "memcached, the store or the broker is unreachable, or the server is busy; see "
        "Retry-After",
    }
    found: dict[str, Any] = {}
    for status in statuses:
        found.update(responds(status, "ProblemBody", meaning[status]))
    return found


def param(name: str, where: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": where == "path",
        "description": description,
        "schema": schema,
    }
