"""Follower and following lists (``GET /v1/users/{user}/followers|following``), paged over the
same cached list ``fanout followers`` reads, and the point query
``GET /v1/users/{a}/following/{b}``, answered by the edge store (the source of truth, one
primary-key lookup, whatever the size of either list)."""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from api import cursors, params
from api.backends import Backends
from api.context import context
from api.problems import invalid
from api.routes.known import require_known
from api.routing import ApiRoute, Endpoint, dumps, json_response, problems, responds
from graph import ListKind, ListRef

DEFAULT_LIMIT = 100


def read_members(
    backends: Backends, kind: ListKind, user: str, limit: int, after: str | None
) -> bytes:
    members = sorted(backends.lists.read(ListRef(kind, user)))
    if not members:
        require_known(backends, [("user", user)])
    start = 0 if after is None else bisect_right(members, after)
    page = members[start : start + limit]
    more = start + limit < len(members)
    nxt = cursors.encode(page[-1]) if more and page else None
    return dumps({"user": user, "members": page, "count": len(members), "next": nxt})


def members_endpoint(kind: ListKind) -> Endpoint:
    async def members(request: Request) -> Response:
        ctx = context(request)
        user = params.user_id(request, "user")
        ctx.guard.read_lists(request)
        limit = params.limit(request, DEFAULT_LIMIT)
        raw = params.cursor(request)
        try:
            after = None if raw is None else cursors.decode(raw)
        except cursors.BadMemberCursor:
            raise invalid("cursor", "the `next` of a previous page of this list") from None
        return json_response(await ctx.pool.run(read_members, kind, user, limit, after))

    return members


def check_following(backends: Backends, follower: str, followee: str) -> bytes:
    following = backends.store.is_following(follower, followee)
    if not following:
        require_known(backends, [("a", follower), ("b", followee)])
    return dumps({"following": following})


async def is_following(request: Request) -> Response:
    ctx = context(request)
    follower, followee = params.user_id(request, "a"), params.user_id(request, "b")
    ctx.guard.read_lists(request)
    return json_response(await ctx.pool.run(check_following, follower, followee))


def _list_operation(kind: ListKind) -> dict[str, Any]:
    name = kind.name.lower()
    return {
        "operationId": f"get{name.capitalize()}",
        "summary": f"A page of a user's {name} list, sorted by id, with the list's count",
        "description": "Public unless FANOUT_API_PRIVATE_LISTS (then any valid token).",
        "parameters": [
            params.user_param("user", "whose list"),
            params.limit_param(DEFAULT_LIMIT),
            params.CURSOR_PARAM,
        ],
        "responses": {
            **responds(200, "MemberPage", "a page (empty for a known user with no edges)"),
            **problems(400, 401, 404, 503),
        },
    }


ROUTES = (
    ApiRoute(
        "/v1/users/{user}/followers",
        "GET",
        members_endpoint(ListKind.FOLLOWERS),
        _list_operation(ListKind.FOLLOWERS),
    ),
    ApiRoute(
        "/v1/users/{user}/following",
        "GET",
        members_endpoint(ListKind.FOLLOWING),
        _list_operation(ListKind.FOLLOWING),
    ),
    ApiRoute(
        "/v1/users/{a}/following/{b}",
        "GET",
        is_following,
        {
            "operationId": "isFollowing",
            "summary": "Whether a follows b now",
            "parameters": [
                params.user_param("a", "the follower"),
                params.user_param("b", "the followee"),
            ],
            "responses": {
                **responds(200, "FollowingAnswer", "the answer"),
                **problems(400, 401, 404, 503),
            },
        },
    ),
)
