"""RFC 9457 problem details: every error this API returns is ``application/problem+json``.

A ``Problem`` raised anywhere in a request becomes its response. ``CatchAll`` turns everything
else into one too, so no client ever sees a traceback: failures that graph/failures.py calls
transient (memcached or the store unreachable, busy or restarting) become 503 with
``Retry-After``; anything else is a 500 that names nothing internal and is logged here, with
its traceback, for the operator. A client that disconnected before its request was read gets
nothing and is no error of ours.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from timeline_fanout.graph.failures import is_transient

MEDIA_TYPE = "application/problem+json"
TYPE_PREFIX = "urn:fanout:problem:"
log = logging.getLogger("fanout.api")


@dataclass(frozen=True, slots=True)
class FieldError:
    """One broken rule: ``field`` is a query or path parameter, or a dotted path in the body
    (``index`` says which event of a batch)."""

    field: str
    rule: str
    index: int | None = None

    def as_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"field": self.field, "rule": self.rule}
        if self.index is not None:
            found["index"] = self.index
        return found


@dataclass(slots=True)
class Problem(Exception):
    status: int
    kind: str  # the type's slug: urn:fanout:problem:{kind}
    title: str
    detail: str = ""
    errors: list[FieldError] = field(default_factory=list)
    headers: Mapping[str, str] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def response(self, instance: str) -> Response:
        body: dict[str, Any] = {
            "type": TYPE_PREFIX + self.kind,
            "title": self.title,
            "status": self.status,
            "detail": self.detail or self.title,
            "instance": instance,
        }
        if self.errors:
            body["errors"] = [e.as_dict() for e in self.errors]
        body.update(self.extra)
        return Response(orjson.dumps(body), self.status, dict(self.headers), MEDIA_TYPE)


def invalid(field_name: str, rule: str, status: int = 400) -> Problem:
    """A request parameter that breaks a rule."""
    return Problem(
        status,
        "invalid-request",
        "Invalid request",
        f"{field_name}: must be {rule}",
        [FieldError(field_name, rule)],
    )


def unavailable(retry_after_s: int, detail: str, extra: Mapping[str, Any] | None = None) -> Problem:
    return Problem(
        503,
        "unavailable",
        "Service unavailable",
        detail,
        headers={"Retry-After": str(retry_after_s)},
        extra=extra or {},
    )


async def on_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Problem)
    return exc.response(request.url.path)


async def on_http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (no such route, method not allowed) in the same form."""
    assert isinstance(exc, HTTPException)
    kind = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http-error")
    headers = dict(exc.headers or {})
    return Problem(exc.status_code, kind, str(exc.detail), headers=headers).response(
        request.url.path
    )


class CatchAll:
    """ASGI middleware: an exception no handler took becomes a problem response (503 for a
    transient store or cache failure, else 500), never a traceback. If the response had
    already started there is nothing left to send; the error is logged and re-raised."""

    def __init__(self, app: ASGIApp, retry_after_s: int) -> None:
        self.app = app
        self.retry_after_s = retry_after_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except ClientDisconnect:
            # The client went away while sending its body: nobody is left to answer, and it
            # is the client's doing, not a failure of ours (metrics count it as 499).
            log.debug("client disconnected before its request was read: %s", scope["path"])
        except Exception as exc:
            if started:
                raise
            problem = self.problem_for(exc)
            await problem.response(scope["path"])(scope, receive, send)

    def problem_for(self, exc: Exception) -> Problem:
        if is_transient(exc):
            log.warning("backend unavailable: %s: %s", type(exc).__name__, exc)
            return unavailable(
                self.retry_after_s, "a backend (memcached or the store) is not answering"
            )
        log.exception("internal error")
        return Problem(500, "internal", "Internal error", "the server failed; see its logs")
