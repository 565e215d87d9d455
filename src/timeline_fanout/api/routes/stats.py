"""``GET /v1/stats``: the consumers' lag and committed offsets, read from the broker
(api/consumer_lag.py says why and how exact). Public unless ``FANOUT_API_PRIVATE_LISTS``, like
the lists: it tells how fresh timelines are, nothing about any user."""

from __future__ import annotations

import logging

from confluent_kafka import KafkaException
from starlette.requests import Request
from starlette.responses import Response

from timeline_fanout.api.backends import Backends
from timeline_fanout.api.context import context
from timeline_fanout.api.problems import unavailable
from timeline_fanout.api.routing import ApiRoute, dumps, json_response, problems, responds

log = logging.getLogger("fanout.api")


def read_stats(backends: Backends) -> bytes:
    return dumps(backends.lag.snapshot())


async def stats(request: Request) -> Response:
    ctx = context(request)
    ctx.guard.read_lists(request)
    try:
        return json_response(await ctx.pool.run(read_stats))
    except KafkaException as exc:  # its text names the brokers: the log's, not the client's
        log.warning("stats: the broker did not answer: %s", exc)
        raise unavailable(ctx.settings.retry_after_s, "the broker did not answer") from None


ROUTES = (
    ApiRoute(
        "/v1/stats",
        "GET",
        stats,
        {
            "operationId": "getStats",
            "summary": "The consumers' lag and committed offsets, from the broker",
            "description": "Lag is committed offsets against high watermarks per consumer "
            "group (approximate on the Tansu dev broker). Rates: the rise of `committed` "
            "between two snapshots over their `at`. Public unless FANOUT_API_PRIVATE_LISTS.",
            "responses": {
                **responds(200, "Stats", "one snapshot"),
                **problems(401, 503),
            },
        },
    ),
)
