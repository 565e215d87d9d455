"""Wire form: one JSON object per Kafka message.

Decoding goes straight from bytes through pydantic's Rust JSON parser, which rejects invalid
UTF-8, malformed JSON and absurd nesting without recursion in Python, so no input can crash a
consumer; every failure becomes one ``EventDecodeError`` naming the field and the rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import TypeAdapter, ValidationError

from schemas.events import Event, FanoutTask, Follow, Post, Unfollow, UserRemoved
from schemas.ids import ID_PATTERN, ID_RULE

AnyEvent = Follow | Unfollow | Post | UserRemoved | FanoutTask
_ADAPTER: TypeAdapter[AnyEvent] = TypeAdapter(Event)
MAX_MESSAGE_BYTES = 1024 * 1024


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
    if len(loc) > 1 and loc[0] in ("follow", "unfollow", "post", "user_removed", "fanout_task"):
        loc = loc[1:]
    field = ".".join(loc)
    kind = err["type"]
    if kind == "string_pattern_mismatch" and err.get("ctx", {}).get("pattern") == ID_PATTERN:
        return EventDecodeError(f"must be {ID_RULE}", field)
    if kind == "union_tag_invalid":
        return EventDecodeError(
            "unknown event type; expected follow, unfollow, post or user_removed", "type"
        )
    if kind == "union_tag_not_found":
        return EventDecodeError("missing event type", "type")
    if kind == "model_type" or kind == "model_attributes_type":
        return EventDecodeError("event must be a JSON object")
    if kind in ("json_invalid", "json_type"):
        return EventDecodeError(f"not valid JSON: {err['msg']}")
    return EventDecodeError(err["msg"], field)


def decode_event(payload: bytes | str) -> AnyEvent:
    """Parse one wire message; raises ``EventDecodeError`` and nothing else."""
    if payload is None:
        raise EventDecodeError("empty message")
    if len(payload) > MAX_MESSAGE_BYTES:
        raise EventDecodeError(f"message is {len(payload)} bytes; the limit is {MAX_MESSAGE_BYTES}")
    try:
        return _ADAPTER.validate_json(payload)
    except ValidationError as exc:
        raise _describe(exc) from None
    except (ValueError, TypeError, RecursionError) as exc:  # defensive: never escape as a crash
        raise EventDecodeError(f"undecodable message: {exc}") from None


def validate_event(obj: Any) -> AnyEvent:
    """Validate an already-parsed object (library callers that build dicts)."""
    try:
        return _ADAPTER.validate_python(obj)
    except ValidationError as exc:
        raise _describe(exc) from None


def encode_event(event: AnyEvent) -> bytes:
    return orjson.dumps(event.model_dump(exclude_none=True))
