"""Follower and following lists (``GET /v1/users/{user}/followers|following``) and the point
query ``GET /v1/users/{a}/following/{b}``, all answered by the edge store, the source of truth.

A page is one range of the store's index past the cursor (``members > cursor ORDER BY member
LIMIT n+1``). Its count is the page's own length when the first page holds the whole list, else
one lookup: the store's kept count, or the Mongo store's cached count, counted again at most
once a second after the user's edges change (graph/lists/counts.py). What a page costs does
not depend on the list's size, so no client can make the server read a whole list, whatever
list it builds. The cursor is the last member shown (a user id); any user id is a place in a
list, so any cursor the OpenAPI pattern admits is accepted. An empty list is told by its first
page, before any count is asked: an unknown user costs store lookups and no cache item.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from timeline_fanout.api import params
from timeline_fanout.api.backends import Backends
from timeline_fanout.api.context import context
from timeline_fanout.api.problems import invalid
from timeline_fanout.api.routes.known import require_known
from timeline_fanout.api.routing import ApiRoute, Endpoint, dumps, json_response, problems, responds
from timeline_fanout.graph import ListKind
from timeline_fanout.schemas import ID_RULE, is_valid_id
from timeline_fanout.schemas.ids import ID_PATTERN

DEFAULT_LIMIT = 100


def read_members(
    backends: Backends, kind: ListKind, user: str, limit: int, after: str | None
) -> bytes:
    page_of = backends.store.followers if kind is ListKind.FOLLOWERS else backends.store.following
    members = page_of(user, after=after, limit=limit + 1)
    if after is None and len(members) <= limit:
        count = len(members)  # the first page is the whole list
    elif not members and not page_of(user, limit=1):
        count = 0
    else:
        counts = backends.counts.counts(user)
        count = counts.followers if kind is ListKind.FOLLOWERS else counts.following
    if count == 0:
        require_known(backends, [("user", user)])
    page = members[:limit]
    nxt = page[-1] if len(members) > limit else None
    return dumps({"user": user, "members": page, "count": count, "next": nxt})


def members_endpoint(kind: ListKind) -> Endpoint:
    async def members(request: Request) -> Response:
        ctx = context(request)
        user = params.user_id(request, "user")
        ctx.guard.read_lists(request)
        limit = params.limit(request, DEFAULT_LIMIT)
        after = params.cursor(request)
        if after is not None and not is_valid_id(after):
            raise invalid("cursor", f"the `next` of a page of this list ({ID_RULE})")
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
            params.cursor_param(
                ID_PATTERN, "the `next` of the previous page: members after this id are shown"
            ),
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
