"""Wire form: one JSON object per Kafka message.

Decoding goes straight from bytes through pydantic's Rust JSON parser, which rejects invalid
UTF-8, malformed JSON and absurd nesting without recursion in Python, so no input can crash a
consumer; every failure becomes one ``EventDecodeError`` naming the field and the rule.

The rules on the message's bytes (``byte_rule_violation``: present, at most
``MAX_MESSAGE_BYTES``, UTF-8 without a byte order mark) are the ones JSON Schema cannot state,
since a schema sees only the parsed value; every other rule lives in the models (events.py) and
is published from them as JSON Schema (json_schema.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import TypeAdapter, ValidationError

from timeline_fanout.native_core import core
from timeline_fanout.schemas.events import (
    SCHEMA_VERSION,
    Event,
    FanoutTask,
    Follow,
    Post,
    PostDeleted,
    Unfollow,
    UserRemoved,
)
from timeline_fanout.schemas.ids import ID_PATTERN, ID_RULE

AnyEvent = Follow | Unfollow | Post | PostDeleted | UserRemoved | FanoutTask
_ADAPTER: TypeAdapter[AnyEvent] = TypeAdapter(Event)
MAX_MESSAGE_BYTES = 1024 * 1024
_BOM = b"\xef\xbb\xbf"
EVENT_TAGS = ("follow", "unfollow", "post", "post_deleted", "user_removed", "fanout_task")


@dataclass(frozen=True, slots=True)
class EventDecodeError(Exception):
    """Why a payload is not a valid event; ``field`` is a dotted path or ``""`` for the whole."""

    reason: str
    field: str = ""

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}" if self.field else self.reason


def _describe(exc: ValidationError) -> EventDecodeError:
    err = exc.errors(include_url=False, include_input=False)[0]
    loc = [str(part) for part in err["loc"]]
    # Union errors carry the chosen tag as the first location element; it is not a field.
    if len(loc) > 1 and loc[0] in EVENT_TAGS:
        loc = loc[1:]
    field = ".".join(loc)
    kind = err["type"]
    if kind == "string_pattern_mismatch" and err.get("ctx", {}).get("pattern") == ID_PATTERN:
        return EventDecodeError(f"must be {ID_RULE}", field)
    if kind == "union_tag_invalid":
        return EventDecodeError(
            "unknown event type; expected follow, unfollow, post, post_deleted or user_removed",
            "type",
        )
    if kind == "union_tag_not_found":
        return EventDecodeError("missing event type", "type")
    if kind == "model_type" or kind == "model_attributes_type":
        return EventDecodeError("event must be a JSON object")
    if kind in ("json_invalid", "json_type"):
        return EventDecodeError(f"not valid JSON: {err['msg']}")
    return EventDecodeError(err["msg"], field)


def byte_rule_violation(payload: bytes | str | None) -> EventDecodeError | None:
    """Why the message's bytes break a rule JSON Schema cannot express, or ``None``. A null value
    is a Kafka tombstone: events are never deleted by key (send ``user_removed``). RFC 8259
    forbids a BOM on the wire; refusing it (rather than skipping it, as some parsers do) keeps
    every consumer of the topic reading the same bytes the same way."""
    if payload is None:
        return EventDecodeError("null value (a tombstone): events are not deleted by key")
    if len(payload) == 0:
        return EventDecodeError("empty message")
    if len(payload) > MAX_MESSAGE_BYTES:
        size = len(payload)
        return EventDecodeError(f"message is {size} bytes; the limit is {MAX_MESSAGE_BYTES}")
    if isinstance(payload, bytes) and payload.startswith(_BOM):
        return EventDecodeError("starts with a UTF-8 byte order mark; send JSON without one")
    return None


def _utf8_error(payload: bytes | str) -> EventDecodeError | None:
    if isinstance(payload, str):
        return None
    try:
        payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        return EventDecodeError(f"not valid UTF-8: byte {exc.start} ({exc.reason})")
    return None


def _surrogate_hint(error: EventDecodeError) -> EventDecodeError:
    if "hex escape" not in error.reason:
        return error
    return EventDecodeError(f"{error.reason} (a lone surrogate escape is not valid Unicode)")


def decode_event(payload: bytes | str | None) -> AnyEvent:
    """Parse one wire message; raises ``EventDecodeError`` and nothing else. A chunk task in
    the publisher's own form is read by the native core where it runs
    (timeline_fanout/native_core.py); every other payload, and every refusal, is
    ``decode_event_reference``'s."""
    if core is not None and isinstance(payload, bytes) and len(payload) <= MAX_MESSAGE_BYTES:
        fields = core.read_fanout_task(payload)
        if fields is not None:
            event_id, ts, author, post_id, post_ts, chunk, followers = fields
            return FanoutTask.model_construct(
                event_id=event_id,
                ts=ts,
                v=SCHEMA_VERSION,
                type="fanout_task",
                author=author,
                post_id=post_id,
                post_ts=post_ts,
                chunk=chunk,
                followers=followers,
            )
    return decode_event_reference(payload)


def decode_event_reference(payload: bytes | str | None) -> AnyEvent:
    """``decode_event`` by pydantic: the meaning of every wire message."""
    broken = byte_rule_violation(payload)
    if broken is not None:
        raise broken
    assert payload is not None
    try:
        return _ADAPTER.validate_json(payload)
    except ValidationError as exc:
        described = _describe(exc)
        if described.reason.startswith("not valid JSON"):  # say why when it is the encoding
            raise (_utf8_error(payload) or _surrogate_hint(described)) from None
        raise described from None
    except (ValueError, TypeError, RecursionError) as exc:  # defensive: never escape as a crash
        raise EventDecodeError(f"undecodable message: {exc}") from None


def validate_event(obj: Any) -> AnyEvent:
    """Validate an already-parsed object: the entry point for library callers that build dicts.

    The same rules as ``decode_event`` applies to wire messages (ids, sizes, unknown fields), so
    whatever this accepts a consumer accepts too.

    Args:
        obj: A mapping with a ``type`` field (``follow``, ``unfollow``, ``post``,
            ``post_deleted``, ``user_removed``, ``fanout_task``) and that type's fields.

    Returns:
        The event model of that type (``Follow``, ``Post``, ...), without envelope unless
        ``obj`` carried one.

    Raises:
        EventDecodeError: ``obj`` breaks a rule; ``field`` names the field and ``reason`` why.

    Example:
        >>> event = validate_event({"type": "follow", "follower": "ann", "followee": "bob"})
        >>> type(event).__name__, event.followee
        ('Follow', 'bob')
    """
    try:
        return _ADAPTER.validate_python(obj)
    except ValidationError as exc:
        raise _describe(exc) from None


def encode_event(event: AnyEvent) -> bytes:
    """The wire form of an event: a chunk task's by the native core where it runs (the same
    bytes), any other's by ``encode_event_reference``."""
    if core is not None and type(event) is FanoutTask:
        data = core.write_fanout_task(
            event.event_id,
            event.ts,
            event.v,
            event.author,
            event.post_id,
            event.post_ts,
            event.chunk,
            event.followers,
        )
        if data is not None:
            return data
    return encode_event_reference(event)


def encode_event_reference(event: AnyEvent) -> bytes:
    """``encode_event`` by pydantic and orjson; a chunk task's followers as a JSON array
    whatever sequence holds them (the model dumps any as a list)."""
    return orjson.dumps(event.model_dump(exclude_none=True))


def fanout_task(
    author: str, post_id: str, post_ts: int, chunk: int, followers: Sequence[str]
) -> FanoutTask:
    """A chunk task of these fields, validated (``FanoutTask``'s rules and errors): checked by
    the native core where it runs, then built without validating again (a ``MemberList``, a
    list's decode put in order, stays one: no ``str`` per follower; a list is copied, as the
    model copies it); by the model where the core does
    not run or does not pass them, on the followers as a list, so a refusal is always the
    model's own."""
    if core is not None and core.valid_fanout_task(author, post_id, post_ts, chunk, followers):
        return FanoutTask.model_construct(
            type="fanout_task",
            author=author,
            post_id=post_id,
            post_ts=post_ts,
            chunk=chunk,
            # A list is the caller's, and may change after this check: the task keeps its own.
            followers=followers if isinstance(followers, core.MemberList) else list(followers),
        )
    return FanoutTask(
        type="fanout_task",
        author=author,
        post_id=post_id,
        post_ts=post_ts,
        chunk=chunk,
        followers=list(followers)
        if core is not None and isinstance(followers, core.MemberList)
        else followers,
    )
