"""The browser page at ``/`` (api/static/: plain HTML and one script, no build step, nothing
from other origins). It reads the same routes any app does, with a bearer token pasted into
the page when auth is on. Served from memory: the files are read once, at import."""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from timeline_fanout.api.routing import ApiRoute, Endpoint

STATIC = files("timeline_fanout.api") / "static"
# Only this origin's script, styles inline in the page, fetches to this origin: an injected
# string could run nothing. No other site may frame the page (a token is pasted into it:
# clickjacking), and no address leaves it in a Referer (the fragment names a user).
HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'; object-src 'none'",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


def _static(name: str, media_type: str) -> tuple[Endpoint, dict[str, Any]]:
    body = (STATIC / name).read_bytes()

    async def serve(_request: Request) -> Response:
        return Response(body, media_type=media_type, headers=HEADERS)

    operation: dict[str, Any] = {
        "operationId": "page" if name == "index.html" else "pageScript",
        "summary": f"The browser page: {name}",
        "security": [],
        "responses": {"200": {"description": name, "content": {media_type: {}}}},
    }
    return serve, operation


ROUTES = (
    ApiRoute("/", "GET", *_static("index.html", "text/html; charset=utf-8")),
    ApiRoute("/app.js", "GET", *_static("app.js", "text/javascript; charset=utf-8")),
)
