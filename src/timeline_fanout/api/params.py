"""Path and query parameters: each one checked against its rule, and a broken rule answered
with a problem naming the parameter and the rule (never a 500, never a silent default)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from timeline_fanout.api.problems import invalid
from timeline_fanout.api.routing import param
from timeline_fanout.schemas import ID_RULE, is_valid_id
from timeline_fanout.schemas.ids import ID_PATTERN

MAX_LIMIT = 1000


def query(request: Request) -> dict[str, str]:
    """The query parameters, as Starlette's ``request.query_params`` reads them (the last of
    a repeated name wins, a name without ``=`` is empty). A query with nothing escaped is split
    here: building Starlette's multi-dict cost ~5% of a warm timeline request. Kept in the
    scope for the request's other parameters."""
    found: dict[str, str] | None = request.scope.get("fanout.query")
    if found is None:
        raw: bytes = request.scope["query_string"]
        if b"%" in raw or b"+" in raw:
            found = dict(request.query_params)
        else:
            found = {}
            for pair in raw.decode("latin-1").split("&"):
                if pair:
                    name, _, value = pair.partition("=")
                    found[name] = value
        request.scope["fanout.query"] = found
    return found


def user_id(request: Request, name: str) -> str:
    value: str = request.path_params[name]
    if not is_valid_id(value):
        raise invalid(name, ID_RULE)
    return value


def limit(request: Request, default: int) -> int:
    raw = query(request).get("limit")
    if raw is None:
        return default
    rule = f"an integer from 1 to {MAX_LIMIT}"
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 4) or not 1 <= int(raw) <= MAX_LIMIT:
        raise invalid("limit", rule)
    return int(raw)


def cursor(request: Request) -> str | None:
    """The ``next`` of a previous page, opaque to clients; its content is checked by the
    reader that made it."""
    raw = query(request).get("cursor")
    if raw is not None and not (0 < len(raw) <= 512 and raw.isascii()):
        raise invalid("cursor", "the `next` value of a previous page")
    return raw


def user_param(name: str, description: str) -> dict[str, Any]:
    return param(name, "path", description, {"type": "string", "pattern": ID_PATTERN})


def limit_param(default: int) -> dict[str, Any]:
    schema = {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": default}
    return param("limit", "query", "entries per page", schema)


def cursor_param(pattern: str, description: str) -> dict[str, Any]:
    """The published rule is the one the route applies: any string the pattern admits is a
    cursor the route accepts (a place in the list, whether or not a page ended there)."""
    schema = {"type": "string", "pattern": pattern.removesuffix("$") + "(?!\\n)$"}
    return param("cursor", "query", description, schema)
