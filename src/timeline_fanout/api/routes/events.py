"""``POST /v1/events``: one event or a JSON array of up to 1000, for apps that cannot speak
Kafka. Validation is the publisher's (``validate_event`` and its default admission,
``APP_EVENTS`` of producers/admission.py: a ``fanout_task`` is refused), applied to every event
before any is sent, so a batch with one bad event publishes nothing. The 202 comes once the
broker has acknowledged every event (the publisher's flush and delivery reports); a timeout or
a refusal is a 503 naming the events that were not acknowledged, which a client retries with
the same body (give events your own ``event_id`` and ``ts`` to make a retry exact)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from timeline_fanout.api.backends import Backends
from timeline_fanout.api.body import json_body
from timeline_fanout.api.context import context
from timeline_fanout.api.problems import FieldError, Problem, unavailable
from timeline_fanout.api.routing import ApiRoute, dumps, json_response, problems, ref, responds
from timeline_fanout.producers.admission import APP_EVENTS
from timeline_fanout.schemas import AnyEvent, EventDecodeError, validate_event
from timeline_fanout.schemas.events import EVENT_TYPES, Follow

MAX_EVENTS = 1000
# A problem names each broken field by its path; an unknown field's name is the client's own
# text, of any length the body allows, so it is cut here: a 422 stays small whatever was sent.
FIELD_SHOWN = 64
# 1000 posts with 4096-character texts, JSON-escaped: the largest batch the rules allow.
MAX_BODY_BYTES = 32 * 1024 * 1024
# An event is a flat object of at most MAX_FIELDS fields: "{", a key, ":" and a value (two
# strings at most) per field, a "," between fields; and a "," between events, "[" around them.
MAX_FIELDS = max(len(model.model_fields) for model in EVENT_TYPES.values())
MAX_TOKENS = MAX_EVENTS * (4 * MAX_FIELDS + 1) + 1


def parse(body: bytes) -> list[AnyEvent]:
    """Every event validated as the publisher would, or a 400/422 naming each broken rule
    (with the event's index when the body is an array)."""
    try:
        doc: Any = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise Problem(
            400,
            "invalid-json",
            "Body is not JSON",
            str(exc),
            [FieldError("", "a JSON event or array of events")],
        ) from None
    single = not isinstance(doc, list)
    items = [doc] if single else doc
    if not 1 <= len(items) <= MAX_EVENTS:
        rule = f"an event or an array of 1 to {MAX_EVENTS} events"
        raise Problem(
            422, "invalid-events", "Invalid events", f"must be {rule}", [FieldError("", rule)]
        )
    events: list[AnyEvent] = []
    errors: list[FieldError] = []
    for index, item in enumerate(items):
        try:
            events.append(APP_EVENTS.admit(validate_event(item)))
        except EventDecodeError as exc:
            errors.append(FieldError(shown_field(exc.field), exc.reason, None if single else index))
    if errors:
        shown = "; ".join(
            (f"[{e.index}] " if e.index is not None else "") + f"{e.field or 'event'}: {e.rule}"
            for e in errors[:5]
        )
        raise Problem(422, "invalid-events", "Invalid events", shown, errors)
    return events


def shown_field(path: str) -> str:
    """``path`` as a problem shows it: at most ``FIELD_SHOWN`` characters, a cut one marked."""
    return path if len(path) <= FIELD_SHOWN else path[: FIELD_SHOWN - 1] + "…"


def refuse_follows_past(backends: Backends, events: list[AnyEvent], cap: int) -> None:
    """422 for the follows of any follower whom this batch would take past ``cap`` followed
    (the kept or cached count, one lookup per follower, plus the batch's follows)."""
    follows: dict[str, list[int]] = {}
    for index, event in enumerate(events):
        if isinstance(event, Follow):
            follows.setdefault(event.follower, []).append(index)
    rule = f"a user follows at most {cap} users"
    errors = [
        FieldError("follower", rule, indexes[-1])
        for follower, indexes in follows.items()
        if backends.counts.counts(follower).following + len(indexes) > cap
    ]
    if errors:
        raise Problem(422, "invalid-events", "Invalid events", rule, errors)


def publish(
    backends: Backends, events: list[AnyEvent], timeout: float, retry: int, max_following: int
) -> bytes:
    refuse_follows_past(backends, events, max_following)
    publisher = backends.publisher
    sent = [publisher.publish(event, tag=index) for index, event in enumerate(events)]
    report = publisher.flush(timeout)
    if not report.ok:
        failed = [{"index": f.tag, "event_id": f.event_id, "error": f.error} for f in report.failed]
        missing = len(events) - report.delivered
        raise unavailable(
            retry,
            f"the broker did not acknowledge {missing} of {len(events)} events",
            {"failed": failed, "undelivered": report.undelivered},
        )
    return dumps({"event_ids": [event.event_id for event in sent]})


async def post_events(request: Request) -> Response:
    ctx = context(request)
    who = ctx.guard.publisher(request)
    # The producer's own message timeout is the API's (see cli/api_server.py), so every
    # event has its delivery report by then: the flush waits a little longer than that.
    timeout = ctx.settings.publish_timeout_s + 5
    async with json_body(
        request,
        max_bytes=MAX_BODY_BYTES,
        max_tokens=MAX_TOKENS,
        budget=ctx.body_budget,
        timeout_s=ctx.settings.body_timeout_s,
        retry_after_s=ctx.settings.retry_after_s,
    ) as body:
        events = parse(body)
        ctx.guard.publish_for(who, events)
        answer = await ctx.pool.run(
            publish, events, timeout, ctx.settings.retry_after_s, ctx.settings.max_following
        )
    return json_response(answer, 202)


EVENT_SCHEMA: dict[str, Any] = {"oneOf": [ref(f"{name}Event") for name in EVENT_TYPES]}

ROUTES = (
    ApiRoute(
        "/v1/events",
        "POST",
        post_events,
        {
            "operationId": "publishEvents",
            "summary": f"Publish one event or an array of up to {MAX_EVENTS}",
            "description": (
                "Needs scope fanout:publish; without fanout:publish-all, every event's actor "
                "(follower, author of a post or of a deleted post, removed user) must be the "
                "token's sub, so a user deletes only their own posts. All events are "
                "validated before any is sent. 202 once the broker acknowledged every event."
            ),
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {
                            "oneOf": [
                                EVENT_SCHEMA,
                                {
                                    "type": "array",
                                    "items": EVENT_SCHEMA,
                                    "minItems": 1,
                                    "maxItems": MAX_EVENTS,
                                },
                            ]
                        }
                    }
                },
            },
            "responses": {
                **responds(202, "Accepted", "every event acknowledged by the broker"),
                **problems(400, 401, 403, 408, 413, 415, 422, 503),
            },
        },
    ),
)
