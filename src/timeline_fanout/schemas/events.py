"""The five event types apps publish, the internal chunk task, and their envelope.

One pydantic model per type, joined by a discriminated union on ``type`` so decoding picks the
model from the payload in Rust without trying each model in turn. Unknown fields are rejected:
a typo such as ``folower`` must not silently turn into a different event.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
)

from timeline_fanout.schemas.ids import ID_ALPHABET, Id, charset, charset_schema

SCHEMA_VERSION = 1
TEXT_MAX_LEN = 4096
MAX_CHUNK = 10_000


def _integral(value: object) -> object:
    """JSON Schema's ``integer`` is any number whose fractional part is zero, and JavaScript's
    ``JSON.parse`` cannot tell ``1.0`` from ``1``; so here too ``1.0`` and ``1e3`` are the
    integers 1 and 1000. Anything else goes on to the strict check: a boolean or ``1.5`` is
    refused, as the published schema refuses it."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# Milliseconds since the epoch; the bound keeps the value inside a signed 64-bit integer. Each
# constraint comes before the validator so that the generated JSON Schema keeps it.
Millis = Annotated[int, Field(strict=True, ge=0, lt=2**43), BeforeValidator(_integral)]
Version = Annotated[
    int, Field(strict=True, ge=SCHEMA_VERSION, le=SCHEMA_VERSION), BeforeValidator(_integral)
]
Count = Annotated[int, Field(strict=True, ge=0), BeforeValidator(_integral)]
# Python's JSON parser refuses a lone surrogate escape (text must be valid Unicode to be stored
# as UTF-8); the pattern says the same to JSON Schema validators (ajv matches with the "u" flag,
# where a surrogate pair is one code point).
NO_LONE_SURROGATES = "^[^\\ud800-\\udfff]*$"
Text = Annotated[
    str,
    Field(
        strict=True,
        max_length=TEXT_MAX_LEN,
        json_schema_extra={
            "pattern": NO_LONE_SURROGATES,
            "description": f"at most {TEXT_MAX_LEN} Unicode code points; no lone surrogates",
        },
    ),
]
EventId = Annotated[
    str, charset("!-~", 128), charset_schema("!-~", 128, "1..128 printable ASCII characters")
]
Group = Annotated[
    str,
    charset(ID_ALPHABET, 32),
    charset_schema(ID_ALPHABET, 32, f"1..32 characters from [{ID_ALPHABET}]"),
]


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    event_id: EventId | None = None
    ts: Millis | None = None
    v: Version | None = None

    def with_envelope(self, now_ms: int | None = None) -> _Event:
        """Fill the envelope fields the producer left out; present ones are kept as sent."""
        missing: dict[str, object] = {}
        if self.event_id is None:
            missing["event_id"] = uuid.uuid4().hex
        if self.ts is None:
            missing["ts"] = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        if self.v is None:
            missing["v"] = SCHEMA_VERSION
        return self.model_copy(update=missing) if missing else self


class Follow(_Event):
    type: Literal["follow"]
    follower: Id
    followee: Id
    group: Group | None = None


class Unfollow(_Event):
    type: Literal["unfollow"]
    follower: Id
    followee: Id


class Post(_Event):
    type: Literal["post"]
    author: Id
    post_id: Id
    text: Text | None = None


class PostDeleted(_Event):
    """The author's post is gone for good: from every timeline, author page and celebrity merge,
    whichever of the two events arrives first, and a ``post`` with the same id later stays
    deleted. Keyed and routed as a post is."""

    type: Literal["post_deleted"]
    author: Id
    post_id: Id


class UserRemoved(_Event):
    type: Literal["user_removed"]
    user: Id


class FanoutTask(_Event):
    """Internal: one chunk of a large author's fan-out, shared out over the task topic so that
    several consumers deliver one post in parallel. Not for apps to publish."""

    type: Literal["fanout_task"]
    author: Id
    post_id: Id
    post_ts: Millis
    chunk: Count
    # A sequence: the native core reads and writes it as a ``MemberList`` (one buffer, no
    # ``str`` per follower: timeline_fanout/native_core.py); validation makes a list of any
    # other, and a dump lists any.
    followers: Annotated[
        Sequence[Id],
        Field(max_length=MAX_CHUNK),
        AfterValidator(list),
        PlainSerializer(list, return_type=list[str]),
    ]


Event = Annotated[
    Follow | Unfollow | Post | PostDeleted | UserRemoved | FanoutTask, Field(discriminator="type")
]
GraphEvent = Follow | Unfollow | UserRemoved
EVENT_TYPES: dict[str, type[_Event]] = {
    "follow": Follow,
    "unfollow": Unfollow,
    "post": Post,
    "post_deleted": PostDeleted,
    "user_removed": UserRemoved,
}


# The fields whose values, joined by "/", make each type's Kafka key. Chunks of one post spread
# over partitions; every other key keeps the mutations of one list in one partition, in order.
KEY_FIELDS: dict[str, tuple[str, ...]] = {
    "follow": ("followee",),
    "unfollow": ("followee",),
    "post": ("author",),
    "post_deleted": ("author",),
    "user_removed": ("user",),
    "fanout_task": ("author", "post_id", "chunk"),
}


def partition_key(
    event: Follow | Unfollow | Post | PostDeleted | UserRemoved | FanoutTask,
) -> str:
    """Kafka key: every mutation of one follower list must be ordered within one partition."""
    return "/".join(str(getattr(event, name)) for name in KEY_FIELDS[event.type])
