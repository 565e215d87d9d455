"""``GET /v1/timelines/{user}``: a page of a home timeline, through the same
``TimelineReader.page`` as ``fanout timeline``."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from timeline_fanout.api import params
from timeline_fanout.api.backends import Backends
from timeline_fanout.api.context import context
from timeline_fanout.api.problems import Problem, invalid
from timeline_fanout.api.routes.known import require_known
from timeline_fanout.api.routing import ApiRoute, dumps, json_response, problems, responds
from timeline_fanout.graph.timelines.entries import CURSOR_PATTERN, TimelineEntry
from timeline_fanout.graph.timelines.reader import BadCursor, TimelinePage

DEFAULT_LIMIT = 50


def read_page(backends: Backends, user: str, limit: int, cursor: str | None) -> bytes:
    """The blocking read, on a backend thread: any page, and the 404 of an unknown user. The
    user is checked first (one store lookup): a read that came here may build the user's
    following list and timeline in memcached, which an unknown user must not cost."""
    try:
        if cursor is not None:
            TimelineEntry.from_cursor(cursor)  # a broken cursor is a 400 whoever the user is
        require_known(backends, [("user", user)])
        page = backends.timelines.page(user, limit, cursor)
    except BadCursor:
        raise bad_cursor() from None
    return rendered(page)


def rendered(page: TimelinePage) -> bytes:
    return dumps(page.body())


async def timeline(request: Request) -> Response:
    """Served from the event loop when the read is warm and its user is known by it
    (graph/timelines/warm_reads.py); otherwise (a first read, a list that changed, an empty page
    of a user who follows nobody, anything to heal) by ``read_page`` on a backend thread."""
    ctx = context(request)
    user = params.user_id(request, "user")
    ctx.guard.read_timeline(request, user)
    limit = params.limit(request, DEFAULT_LIMIT)
    cursor = params.cursor(request)
    if ctx.warm is not None:
        try:
            body = await ctx.warm.rendered(user, limit, cursor, shown)
        except BadCursor:
            raise bad_cursor() from None
        if body is not None:
            return json_response(body)
    return json_response(await ctx.pool.run(read_page, user, limit, cursor))


def bad_cursor() -> Problem:
    return invalid("cursor", "the `next` of a previous page of this timeline")


def shown(page: TimelinePage) -> bytes | None:
    """A page the warm read may answer with: one whose user follows someone, as an edge makes a
    user known (every entry is by someone followed, so a page that shows something is one). An
    empty page of a user following nobody may be an unknown user's, which only the store can
    tell; it costs the thread little (an empty list)."""
    return rendered(page) if page.following else None


ROUTES = (
    ApiRoute(
        "/v1/timelines/{user}",
        "GET",
        timeline,
        {
            "operationId": "getTimeline",
            "summary": "A page of a user's home timeline, newest first",
            "description": "Served to its owner (sub) or a token with scope fanout:read-all.",
            "parameters": [
                params.user_param("user", "the timeline's owner"),
                params.limit_param(DEFAULT_LIMIT),
                params.cursor_param(
                    CURSOR_PATTERN,
                    "the `next` of the previous page (time!author!post_id): posts older than "
                    "that entry are shown",
                ),
            ],
            "responses": {
                **responds(200, "TimelinePage", "a page (empty for a known user with no posts)"),
                **problems(400, 401, 403, 404, 503),
            },
        },
    ),
)
