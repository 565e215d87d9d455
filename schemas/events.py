"""The four event types and their envelope.

One pydantic model per type, joined by a discriminated union on ``type`` so decoding picks the
model from the payload in Rust without trying each model in turn. Unknown fields are rejected:
a typo such as ``folower`` must not silently turn into a different event.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.ids import ID_ALPHABET, Id, charset, charset_schema

SCHEMA_VERSION = 1
TEXT_MAX_LEN = 4096
MAX_CHUNK = 10_000
# Milliseconds since the epoch; the bound keeps the value inside a signed 64-bit integer.
Millis = Annotated[int, Field(strict=True, ge=0, lt=2**43)]
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
    v: Literal[1] | None = None

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
    text: Annotated[str, Field(strict=True, max_length=TEXT_MAX_LEN)] | None = None


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
    chunk: Annotated[int, Field(strict=True, ge=0)]
    followers: Annotated[list[Id], Field(max_length=MAX_CHUNK)]


Event = Annotated[Follow | Unfollow | Post | UserRemoved | FanoutTask, Field(discriminator="type")]
GraphEvent = Follow | Unfollow | UserRemoved
EVENT_TYPES: dict[str, type[_Event]] = {
    "follow": Follow,
    "unfollow": Unfollow,
    "post": Post,
    "user_removed": UserRemoved,
}


def partition_key(event: Follow | Unfollow | Post | UserRemoved | FanoutTask) -> str:
    """Kafka key: every mutation of one follower list must be ordered within one partition."""
    match event:
        case Follow() | Unfollow():
            return event.followee
        case Post():
            return event.author
        case UserRemoved():
            return event.user
        case FanoutTask():  # chunks of one post spread over partitions
            return f"{event.author}/{event.post_id}/{event.chunk}"
