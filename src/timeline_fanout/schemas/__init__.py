"""Event types, validation and wire encoding. Imports nothing else of this project but the
native core's loader (timeline_fanout/native_core.py), which the codec calls."""

from timeline_fanout.schemas.codec import (
    AnyEvent,
    EventDecodeError,
    decode_event,
    encode_event,
    fanout_task,
    validate_event,
)
from timeline_fanout.schemas.events import (
    SCHEMA_VERSION,
    FanoutTask,
    Follow,
    Post,
    PostDeleted,
    Unfollow,
    UserRemoved,
    partition_key,
)
from timeline_fanout.schemas.ids import ID_RULE, all_valid_ids, is_valid_id
from timeline_fanout.schemas.topics import Topics

__all__ = [
    "ID_RULE",
    "SCHEMA_VERSION",
    "AnyEvent",
    "EventDecodeError",
    "FanoutTask",
    "Follow",
    "Post",
    "PostDeleted",
    "Topics",
    "Unfollow",
    "UserRemoved",
    "all_valid_ids",
    "decode_event",
    "encode_event",
    "fanout_task",
    "is_valid_id",
    "partition_key",
    "validate_event",
]
