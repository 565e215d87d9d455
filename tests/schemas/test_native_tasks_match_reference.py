"""Chunk tasks through the native core have the reference's meaning: for any payload, the
publisher's own or mangled, ``decode_event`` gives the reference's event (fields, and which
were set) or its error; ``encode_event`` writes the reference's bytes for any task; and
``fanout_task`` builds the task the model builds for any fields, or fails with the model's
error."""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.property_budget import examples
from timeline_fanout.native_core import core
from timeline_fanout.schemas import (
    EventDecodeError,
    FanoutTask,
    decode_event,
    encode_event,
    validate_event,
)
from timeline_fanout.schemas.codec import (
    decode_event_reference,
    encode_event_reference,
    fanout_task,
)

pytestmark = pytest.mark.skipif(
    core is None, reason="the native core is not built here, or FANOUT_NATIVE=0"
)

ids = st.text(alphabet="Az09_.:@-", min_size=1, max_size=64)
not_ids = st.sampled_from(["", "a b", "é", "a\\b", 'a"b', "x" * 65, "\ud800"])


def mostly(
    valid: st.SearchStrategy[object], invalid: st.SearchStrategy[object]
) -> st.SearchStrategy[object]:
    """Valid values most of the time, so that many tasks pass every rule and the native reader
    accepts them, and every kind of invalid one some of the time."""
    return st.integers(0, 9).flatmap(lambda n: invalid if n == 0 else valid)


maybe_ids = mostly(ids, not_ids)
millis = mostly(st.integers(0, 2**43 - 1), st.sampled_from([-1, 2**43, 2**64]))
event_ids = mostly(
    st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=128),
    st.sampled_from(["", "x" * 129, "é", 'a"b', "a\\b"]),
)
tasks = st.builds(
    dict,
    event_id=event_ids,
    ts=millis,
    v=mostly(st.just(1), st.just(2)),
    type=mostly(st.just("fanout_task"), st.just("post")),
    author=maybe_ids,
    post_id=maybe_ids,
    post_ts=millis,
    chunk=mostly(st.integers(0, 2**70), st.just(-1)),
    followers=mostly(st.lists(ids, max_size=20), st.lists(maybe_ids, max_size=20)),
)


def compact(task: dict[str, object]) -> bytes:
    """As the publisher writes a task (orjson's form), for any values."""
    text = json.dumps(task, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


@st.composite
def payloads(draw: st.DrawFn) -> bytes:
    task = draw(tasks)
    form = draw(st.sampled_from(["compact", "compact", "compact", "spaced", "reordered"]))
    if form == "spaced":
        raw = json.dumps(task).encode()
    elif form == "reordered":
        raw = compact(dict(reversed(task.items())))
    else:
        raw = compact(task)
    mangle = draw(st.sampled_from(["none", "none", "none", "cut", "insert", "replace"]))
    at = draw(st.integers(0, len(raw)))
    if mangle == "cut":
        raw = raw[:at]
    elif mangle == "insert":
        raw = raw[:at] + draw(st.sampled_from([b" ", b'"', b"\\", b",", b"0", b"\xff"])) + raw[at:]
    elif mangle == "replace":
        raw = raw.replace(
            b'"followers":[',
            draw(st.sampled_from([b'"followers":[1,', b'"x":[', b'"followers":["a",'])),
        )
    return raw


def outcome(decode: Callable[[bytes], object], payload: bytes) -> tuple[object, ...]:
    try:
        event = decode(payload)
    except EventDecodeError as exc:
        return ("refused", exc.reason, exc.field)
    assert isinstance(event, FanoutTask | object)
    fields = getattr(event, "model_fields_set", None)
    return ("decoded", type(event), event, getattr(event, "__dict__", None), fields)


@settings(max_examples=examples(1500))
@given(payloads())
def test_native_task_decode_matches_the_reference(payload: bytes) -> None:
    assert outcome(decode_event, payload) == outcome(decode_event_reference, payload)


@given(tasks.filter(lambda t: t["type"] == "fanout_task"))
def test_native_task_encode_writes_the_reference_bytes(fields: dict[str, object]) -> None:
    try:
        task = FanoutTask.model_validate(fields)
    except ValidationError:
        return
    assert written(encode_event, task) == written(encode_event_reference, task)


def written(encode: Callable[[FanoutTask], bytes], task: FanoutTask) -> tuple[object, ...]:
    """The bytes, or the error (orjson refuses an integer past 64 bits: ``chunk`` has no bound)."""
    try:
        return ("written", encode(task))
    except TypeError as exc:
        return ("refused", str(exc))


def built(fields: dict[str, object], build: Callable[..., FanoutTask]) -> tuple[object, ...]:
    try:
        task = build(**fields)
    except ValidationError as exc:
        return ("refused", exc.errors(include_url=False))
    return ("built", task, task.__dict__, task.model_fields_set)


@given(
    st.builds(
        dict,
        author=st.one_of(maybe_ids, st.just(7)),
        post_id=maybe_ids,
        post_ts=st.one_of(millis, st.sampled_from([True, 1.0, "1"])),
        chunk=st.one_of(st.integers(-1, 2**70), st.just(2.0)),
        followers=st.one_of(st.lists(maybe_ids, max_size=20), st.tuples(ids)),
    )
)
def test_native_task_builder_matches_the_model(fields: dict[str, object]) -> None:
    reference = built(fields, lambda **f: FanoutTask(type="fanout_task", **f))
    assert built(fields, fanout_task) == reference


def test_a_built_task_keeps_its_followers_when_the_callers_list_changes() -> None:
    followers = ["f1", "f2"]
    task = fanout_task("a", "p", 5, 0, followers)
    followers[0] = "not an id!"
    followers.append("f3")
    assert list(task.followers) == ["f1", "f2"]
    assert decode_event(encode_event(task.with_envelope())).followers == ["f1", "f2"]


def test_a_task_read_by_the_core_dumps_copies_and_validates_as_the_models_own() -> None:
    task = FanoutTask(
        type="fanout_task", author="a", post_id="p", post_ts=5, chunk=0, followers=["f1", "f1"]
    ).with_envelope(7)
    data = encode_event_reference(task)
    read, reference = decode_event(data), decode_event_reference(data)
    assert read == reference
    assert read.model_dump() == reference.model_dump()
    assert read.model_dump_json() == reference.model_dump_json()
    assert validate_event(read.model_dump()) == reference
    assert copy.deepcopy(read) == pickle.loads(pickle.dumps(read)) == reference


def test_the_core_reads_and_writes_the_publishers_tasks() -> None:
    assert core is not None
    task = FanoutTask(
        type="fanout_task", author="a", post_id="p", post_ts=5, chunk=0, followers=["f1", "f2"]
    ).with_envelope()
    assert isinstance(task, FanoutTask)
    data = encode_event_reference(task)
    assert (
        core.write_fanout_task(task.event_id, task.ts, task.v, "a", "p", 5, 0, ["f1", "f2"]) == data
    )
    assert core.read_fanout_task(data) == (task.event_id, task.ts, "a", "p", 5, 0, ["f1", "f2"])
