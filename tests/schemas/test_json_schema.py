"""The published JSON Schemas and the Python validation are one rule set.

The schemas are generated from the models (a drift test holds the checked-in files to that), and
a differential test feeds the same events, as wire bytes, to both judges: the Python side (what
``EventPublisher`` and the consumers accept from an app) and the ``jsonschema`` library with the
shipped ``event.json``. They must agree on every event; the only permitted difference is a rule on
the message's bytes (size, UTF-8, byte order mark), which a schema cannot see.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from timeline_fanout.schemas import EventDecodeError, decode_event
from timeline_fanout.schemas.codec import MAX_MESSAGE_BYTES, byte_rule_violation
from timeline_fanout.schemas.json_schema import SCHEMA_DIR, json_schemas, render
from timeline_fanout.schemas.topics import APP_TYPES, admit

EVENT_SCHEMA = jsonschema.Draft202012Validator(
    orjson.loads((SCHEMA_DIR / "event.json").read_bytes())
)


def python_accepts(payload: bytes) -> bool:
    """What an app may publish, judged as the consumers and ``EventPublisher`` judge it."""
    try:
        admit(decode_event(payload), APP_TYPES, "apps")
    except EventDecodeError:
        return False
    return True


def schema_accepts(payload: bytes) -> bool | None:
    """``event.json``'s verdict on the parsed value; ``None`` when the bytes are not UTF-8 JSON
    at all (no value for a schema to judge)."""
    try:
        value = json.loads(payload.decode("utf-8"), parse_constant=_refuse)
    except ValueError:
        return None
    return bool(EVENT_SCHEMA.is_valid(value))


def _refuse(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def bytes_ok(payload: bytes) -> bool:
    if byte_rule_violation(payload) is not None:
        return False
    try:
        payload.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def assert_agree(payload: bytes) -> None:
    verdict = schema_accepts(payload)
    expected = bool(verdict) and bytes_ok(payload)
    assert python_accepts(payload) == expected, (payload[:300], verdict, bytes_ok(payload))


def wire(value: Any, framing: str = "plain") -> bytes:
    """``value`` as message bytes: ``json.dumps`` escapes lone surrogates as ``\\ud800``, as a
    JavaScript producer's ``JSON.stringify`` does; the framings add what only bytes can carry."""
    text = json.dumps(value, allow_nan=False)
    if framing == "raw_surrogates":  # unescaped, encoded anyway: not UTF-8
        raw = json.dumps(value, ensure_ascii=False, allow_nan=False)
        return raw.encode("utf-8", "surrogatepass")
    body = text.encode()
    if framing == "bom":
        return b"\xef\xbb\xbf" + body
    if framing == "oversize":  # valid JSON, only the size is wrong
        return body + b" " * (MAX_MESSAGE_BYTES + 1 - len(body))
    if framing == "at_limit":
        return body + b" " * (MAX_MESSAGE_BYTES - len(body))
    return body


# --- generated events ---------------------------------------------------------------------

EDGE_STRINGS = ["u1", "-lead", "a" * 64, "a" * 65, "a\n", "", "a b", "ünï", "x\ud800", "😀"]
ids = st.sampled_from(EDGE_STRINGS) | st.from_regex(r"[A-Za-z0-9_.:@-]{1,8}", fullmatch=True)
numbers = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64),
    st.sampled_from([0, 1, 2, 1.0, 1e3, 1.5, -0.0, 2.0**43, 2.0**43 - 1, True, False]),
    st.floats(allow_nan=False, allow_infinity=False),
)
texts = st.one_of(
    st.text(max_size=20),  # includes lone surrogates
    st.sampled_from(["x" * 4096, "x" * 4097, "😀" * 4096, "\ud83d", "a\udc00b", "\x00"]),
)
anything = st.one_of(st.none(), st.booleans(), numbers, ids, texts, st.just([]), st.just({}))
FIELDS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "follow": {"follower": ids, "followee": ids, "group": ids},
    "unfollow": {"follower": ids, "followee": ids},
    "post": {"author": ids, "post_id": ids, "text": texts},
    "user_removed": {"user": ids},
    "fanout_task": {
        "author": ids,
        "post_id": ids,
        "post_ts": numbers,
        "chunk": numbers,
        "followers": st.lists(ids, max_size=3),
    },
}
ENVELOPE: dict[str, st.SearchStrategy[Any]] = {
    "event_id": ids | texts,
    "ts": numbers,
    "v": numbers,
}


@st.composite
def events(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from([*FIELDS, "like", None]))
    fields = {**FIELDS.get(kind or "", {}), **ENVELOPE}
    event: dict[str, Any] = {} if kind is None else {"type": kind}
    for name, values in fields.items():
        if draw(st.integers(0, 3)):  # mostly present, sometimes missing
            event[name] = draw(values | anything) if draw(st.integers(0, 5)) == 0 else draw(values)
    if draw(st.integers(0, 9)) == 0:
        event[draw(st.sampled_from(["extra", "Type", "folower"]))] = draw(anything)
    return event if draw(st.integers(0, 19)) else draw(anything)


FRAMINGS = st.sampled_from(["plain"] * 12 + ["bom", "raw_surrogates", "oversize", "at_limit"])
USER_REMOVED = {"type": "user_removed", "user": "u1"}
TASK = {"type": "fanout_task", "author": "a", "post_id": "p", "post_ts": 1, "chunk": 0}


@settings(max_examples=400)
@given(events(), FRAMINGS)
@example({**USER_REMOVED, "ts": 1.0}, "plain")  # integral floats are integers
@example({**USER_REMOVED, "ts": 1e3, "v": 1.0}, "plain")
@example({**USER_REMOVED, "ts": 1.5}, "plain")
@example({**USER_REMOVED, "v": True}, "plain")  # a boolean is not a number
@example({**USER_REMOVED, "ts": False}, "plain")
@example({"type": "post", "author": "a", "post_id": "p", "text": "x\ud800"}, "plain")
@example({"type": "post", "author": "a", "post_id": "p", "text": "\U0001f600"}, "plain")
@example({"type": "post", "author": "a", "post_id": "p", "text": "\ud800"}, "raw_surrogates")
@example({"type": "post", "author": "a", "post_id": "p", "text": "é"}, "raw_surrogates")
@example(USER_REMOVED, "oversize")
@example(USER_REMOVED, "at_limit")
@example(USER_REMOVED, "bom")
@example({**TASK, "followers": ["victim"]}, "plain")  # internal: refused from apps
def test_python_and_the_shipped_schema_agree_on_every_event(event: Any, framing: str) -> None:
    assert_agree(wire(event, framing))


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (wire(USER_REMOVED, "oversize"), "the limit is 1048576"),
        (wire(USER_REMOVED, "bom"), "byte order mark"),
        (b'{"type":"user_removed","user":"\xff"}', "not valid UTF-8"),
    ],
)
def test_byte_rules_are_the_only_difference_and_say_why(payload: bytes, reason: str) -> None:
    """The schema cannot see these (it passes the value, or has none to judge); Python refuses
    them with a reason an app developer can act on."""
    assert schema_accepts(payload) in (True, None)
    with pytest.raises(EventDecodeError, match=reason):
        decode_event(payload)


def test_integral_floats_are_read_as_integers() -> None:
    event = decode_event(b'{"type":"user_removed","user":"u","ts":1e3,"v":1.0}')
    assert (event.ts, event.v) == (1000, 1)
    assert type(event.ts) is int and type(event.v) is int
    assert b'"ts":1000' in orjson.dumps(event.model_dump())


def test_checked_in_schemas_match_the_models() -> None:
    generated = json_schemas()
    assert {p.stem for p in SCHEMA_DIR.glob("*.json")} == set(generated)
    for name, doc in generated.items():
        assert (SCHEMA_DIR / f"{name}.json").read_bytes() == render(doc), (
            f"{name}.json is stale: run python -m schemas.json_schema"
        )


def test_event_schema_takes_exactly_the_app_types() -> None:
    variants = EVENT_SCHEMA.schema["oneOf"]
    names = {v["$ref"].rsplit("/", 1)[1] for v in variants}
    assert names == {"follow", "unfollow", "post", "post_deleted", "user_removed"}
    assert len(variants) == len(APP_TYPES)
