"""``GET /v1/users/{user}/posts``: a page of one author's posts, newest first, with their
texts (graph/timelines/author_pages.py): from the event loop when the author's item and the
posts' bodies are cached (graph/timelines/warm_reads.py), else on a backend thread. An empty
page goes to the thread, which tells a known author with no posts from an unknown user."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from timeline_fanout.api import params
from timeline_fanout.api.backends import Backends
from timeline_fanout.api.context import context
from timeline_fanout.api.problems import Problem, invalid
from timeline_fanout.api.routes.known import require_known
from timeline_fanout.api.routing import ApiRoute, dumps, json_response, problems, responds
from timeline_fanout.graph.timelines.entries import CURSOR_PATTERN
from timeline_fanout.graph.timelines.reader import BadCursor

DEFAULT_LIMIT = 50


def read_posts(backends: Backends, user: str, limit: int, cursor: str | None) -> bytes:
    try:
        page = backends.timelines.author_pages.page(user, limit, cursor)
    except BadCursor:
        raise bad_cursor() from None
    if not page.posts:
        require_known(backends, [("user", user)])
    return dumps(page.body())


async def author_posts(request: Request) -> Response:
    ctx = context(request)
    user = params.user_id(request, "user")
    ctx.guard.read_lists(request)
    limit = params.limit(request, DEFAULT_LIMIT)
    cursor = params.cursor(request)
    if ctx.warm is not None:
        try:
            page = await ctx.warm.author_page(user, limit, cursor)
        except BadCursor:
            raise bad_cursor() from None
        if page is not None and page.posts:
            return json_response(dumps(page.body()))
    return json_response(await ctx.pool.run(read_posts, user, limit, cursor))


def bad_cursor() -> Problem:
    return invalid("cursor", "the `next` of a previous page of this author's posts")


ROUTES = (
    ApiRoute(
        "/v1/users/{user}/posts",
        "GET",
        author_posts,
        {
            "operationId": "getAuthorPosts",
            "summary": "A page of one author's posts with their texts, newest first",
            "description": "Public unless FANOUT_API_PRIVATE_LISTS (then any valid token).",
            "parameters": [
                params.user_param("user", "the author"),
                params.limit_param(DEFAULT_LIMIT),
                params.cursor_param(
                    CURSOR_PATTERN,
                    "the `next` of the previous page (time!author!post_id): "
                    "posts older than that time and post id are shown",
                ),
            ],
            "responses": {
                **responds(200, "AuthorPage", "a page (empty for a known user with no posts)"),
                **problems(400, 401, 404, 503),
            },
        },
    ),
)
