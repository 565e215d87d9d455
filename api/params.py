"""Path and query parameters: each one checked against its rule, and a broken rule answered
with a problem naming the parameter and the rule (never a 500, never a silent default)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from api.problems import invalid
from api.routing import param
from schemas import ID_RULE, is_valid_id
from schemas.ids import ID_PATTERN

MAX_LIMIT = 1000


def user_id(request: Request, name: str) -> str:
    value: str = request.path_params[name]
    if not is_valid_id(value):
        raise invalid(name, ID_RULE)
    return value


def limit(request: Request, default: int) -> int:
    raw = request.query_params.get("limit")
    if raw is None:
        return default
    rule = f"an integer from 1 to {MAX_LIMIT}"
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 4) or not 1 <= int(raw) <= MAX_LIMIT:
        raise invalid("limit", rule)
    return int(raw)


def cursor(request: Request) -> str | None:
    """The ``next`` of a previous page, opaque to clients; its content is checked by the
    reader that made it."""
    raw = request.query_params.get("cursor")
    if raw is not None and not (0 < len(raw) <= 512 and raw.isascii()):
        raise invalid("cursor", "the `next` value of a previous page")
    return raw


def user_param(name: str, description: str) -> dict[str, Any]:
    return param(name, "path", description, {"type": "string", "pattern": ID_PATTERN})


def limit_param(default: int) -> dict[str, Any]:
    schema = {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": default}
    return param("limit", "query", "entries per page", schema)


CURSOR_PARAM = param(
    "cursor", "query", "the `next` of the previous page", {"type": "string", "maxLength": 512}
)
