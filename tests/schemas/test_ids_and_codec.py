from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timeline_fanout.schemas import (
    EventDecodeError,
    FanoutTask,
    Follow,
    Post,
    UserRemoved,
    all_valid_ids,
    decode_event,
    encode_event,
    is_valid_id,
    partition_key,
    validate_event,
)

GOOD_IDS = [
    "u1",
    "A",
    "a" * 64,
    "user.name",
    "x:y",
    "mail@host",
    "under_score",
    "da-sh",
    "-",
    "+"[:0] + "9",
]
BAD_IDS = [
    "",
    "a" * 65,
    "has space",
    "new\nline",
    "cr\rlf",
    "tab\t",
    "ctl\x01",
    "nul\x00",
    "plus+a",
    "semi;",
    "comma,",
    "caret^",
    "slash/",
    "ünï",
    "emoji😀",
    "trailing\n",
]


@pytest.mark.parametrize("good", GOOD_IDS)
def test_valid_ids_pass_everywhere(good: str) -> None:
    assert is_valid_id(good)
    event = validate_event({"type": "follow", "follower": good, "followee": "u2"})
    assert isinstance(event, Follow) and event.follower == good


@pytest.mark.parametrize("bad", BAD_IDS)
@pytest.mark.parametrize("field", ["follower", "followee"])
def test_invalid_ids_are_rejected_naming_field_and_rule(bad: str, field: str) -> None:
    assert not is_valid_id(bad)
    payload = {"type": "follow", "follower": "u1", "followee": "u2", field: bad}
    with pytest.raises(EventDecodeError) as info:
        validate_event(payload)
    assert info.value.field == field
    if (bad and len(bad) <= 64) or len(bad) > 64:
        assert "[A-Za-z0-9_.:@-]" in info.value.reason


def test_token_injection_id_cannot_pass() -> None:
    """An id carrying a token delimiter would let one follow add or remove other members."""
    for evil in ["a +b", "a -b", "a\x20-admin", "x\r\nset k 0 0 1"]:
        with pytest.raises(EventDecodeError):
            validate_event({"type": "unfollow", "follower": evil, "followee": "u2"})


@pytest.mark.parametrize(
    ("payload", "field", "fragment"),
    [
        (b"not json", "", "not valid JSON"),
        (b"\xff\xfe\x00", "", "not valid UTF-8"),
        (b"\xef\xbb\xbf{}", "", "byte order mark"),
        (b'{"type":"post","author":"a","post_id":"p","text":"\\ud800"}', "", "lone surrogate"),
        (None, "", "tombstone"),
        (b"[" * 60000, "", "not valid JSON"),
        (b"[]", "", "object"),
        (b'{"follower":"a","followee":"b"}', "type", "missing event type"),
        (b'{"type":"like","user":"a"}', "type", "unknown event type"),
        (b'{"type":"follow","follower":"a"}', "followee", "required"),
        (b'{"type":"follow","follower":1,"followee":"b"}', "follower", "string"),
        (b'{"type":"follow","follower":"a","followee":"b","extra":1}', "extra", "not permitted"),
        (
            b'{"type":"post","author":"a","post_id":"p","text":' + b'"x"' * 1 + b',"ts":-1}',
            "ts",
            "",
        ),
        (b'{"type":"post","author":"a","post_id":"p","ts":' + b"9" * 5000 + b"}", "", "JSON"),
        (b'{"type":"post","author":"a","post_id":"p","text":"' + b"x" * 5000 + b'"}', "text", ""),
        (b"x" * (1024 * 1024 + 1), "", "limit"),
        (b"", "", "empty message"),
        (b'{"type":"user_removed","user":"u","v":true}', "v", "integer"),
        (b'{"type":"user_removed","user":"u","v":2}', "v", ""),
    ],
)
def test_decode_never_crashes_and_says_why(
    payload: bytes | None, field: str, fragment: str
) -> None:
    with pytest.raises(EventDecodeError) as info:
        decode_event(payload)
    assert info.value.field == field
    assert fragment.lower() in str(info.value).lower()


def test_envelope_defaults_are_added_only_when_missing() -> None:
    bare = decode_event(b'{"type":"follow","follower":"u1","followee":"u2"}')
    assert bare.event_id is None and bare.ts is None and bare.v is None
    full = bare.with_envelope(now_ms=1_700_000_000_000)
    assert full.ts == 1_700_000_000_000 and full.v == 1
    assert full.event_id and len(full.event_id) == 32
    other = bare.with_envelope()
    assert other.event_id != full.event_id
    kept = decode_event(
        b'{"type":"follow","follower":"u1","followee":"u2","event_id":"e1","ts":5,"v":1}'
    )
    assert kept.with_envelope() == kept


def test_wire_roundtrip_is_orjson_and_lossless() -> None:
    post = Post(type="post", author="u1", post_id="p1", text="héllo", ts=1, event_id="e", v=1)
    wire = encode_event(post)
    assert wire.startswith(b"{") and b"null" not in wire
    assert decode_event(wire) == post


def test_partition_keys_order_each_follower_list() -> None:
    assert partition_key(Follow(type="follow", follower="a", followee="b")) == "b"
    assert partition_key(Post(type="post", author="a", post_id="p")) == "a"
    assert partition_key(UserRemoved(type="user_removed", user="z")) == "z"
    task = FanoutTask(
        type="fanout_task", author="a", post_id="p", post_ts=1, chunk=3, followers=["f"]
    )
    assert partition_key(task) == "a/p/3"


@given(st.text(max_size=80))
def test_is_valid_id_agrees_with_event_validation(candidate: str) -> None:
    try:
        validate_event({"type": "user_removed", "user": candidate})
        accepted = True
    except EventDecodeError:
        accepted = False
    assert accepted == is_valid_id(candidate)


@given(st.lists(st.sampled_from([*GOOD_IDS, *BAD_IDS]) | st.text(max_size=70), max_size=6))
def test_bulk_id_check_agrees_with_the_single_one(candidates: list[str]) -> None:
    assert all_valid_ids(candidates) == all(is_valid_id(c) for c in candidates)


def test_bulk_id_check_does_not_read_a_space_as_a_separator() -> None:
    assert all_valid_ids(["a", "b"])
    assert not all_valid_ids(["a b"])
    assert not all_valid_ids(["a", " b"])
    assert not all_valid_ids(["a", ""])
