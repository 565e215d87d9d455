"""The native list decode has the reference's meaning: for any shards, well-formed or corrupt,
``decode`` (the native core, handing back what it does not decide) gives the same members and
token count as ``decode_reference``, or the same ``CorruptList`` with the same reason; and the
core decides every list our writers write itself. The members it gives (``Members``, no
``str`` per member), passed on as the fan-out passes them (put in order, cut into chunk tasks,
written, read back, named as timeline keys), give the reference's tasks, bytes and keys, or its
errors. ``Members`` and ``MemberList`` answer every operation as the reference's ``frozenset``
and ``list`` of ``str`` do, errors included."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.property_budget import examples
from timeline_fanout.graph.lists.tokens import (
    CorruptList,
    DecodedList,
    decode,
    decode_ids,
    decode_reference,
    frozen,
    in_sequence,
)
from timeline_fanout.graph.model.keys import KeySpace, ListKind
from timeline_fanout.native_core import core
from timeline_fanout.schemas import FanoutTask, decode_event, encode_event
from timeline_fanout.schemas.codec import (
    decode_event_reference,
    encode_event_reference,
    fanout_task,
)

pytestmark = pytest.mark.skipif(
    core is None, reason="the native core is not built here, or FANOUT_NATIVE=0"
)

Outcome = tuple[str, object, object]

# Ids, and members no id list holds (a timeline's, one too long, one not ASCII).
members = st.sampled_from(
    ["a", "b", "a-b", "-", "x.y", "u:1", "q@r", "-a", "0001!a!p1", "é", "l" * 64, "l" * 65]
)
# Positions as writers write them, ties included, and past what 16 hex digits hold.
positions = st.one_of(st.integers(0, 12), st.integers(0, 2**64 + 5), st.none())
written = st.builds(
    lambda add, member, pos: (
        ("+" if add else "-") + member + ("" if pos is None else f"#{pos:x}") + " "
    ),
    st.booleans(),
    members,
    positions,
)
# Bytes that break the form: other separators, bad and odd positions (sign, 0x, _, upper case,
# empty, a second #), stray operators, non-ASCII.
separators = st.sampled_from([" ", "  ", "\t", "\n", "\x0b", "\x1c", "\x1f"])
odd = st.sampled_from(["+", "-", "#", "#1f", "#FF", "#-1", "#0x1", "#1_0", "# ", "#1#2", "x"])
pieces = st.one_of(separators, odd, st.sampled_from(["\xff", "\x00", "a", "7"]))
# A shard that does not end with a token's space is corrupt whatever it holds, so most end
# with one, for the rest of the stream to decide.
streams = st.builds(
    lambda parts, ended: ("".join(parts) + ended).encode("latin-1"),
    st.lists(st.one_of(written, written, pieces), max_size=40),
    st.sampled_from([" ", " ", " ", ""]),
)
shard_lists = st.lists(streams, max_size=4)
# Shards as any bytes-like object the reference joins: the core hands those back to it.
any_shards = shard_lists | shard_lists.map(lambda shards: [bytearray(s) for s in shards])


def outcome(decoder: object, shards: list[bytes]) -> Outcome:
    assert callable(decoder)
    try:
        decoded = decoder(list(shards))
    except CorruptList as exc:
        return ("corrupt", str(exc), None)
    assert isinstance(decoded, DecodedList)
    members = decoded.members
    return ("decoded", frozen(members), len(members), sorted(members), decoded.tokens)


@settings(max_examples=examples(2000))
@given(any_shards)
def test_native_decode_matches_the_reference_for_any_shards(shards: list[bytes]) -> None:
    assert outcome(decode, shards) == outcome(decode_reference, shards)


@settings(max_examples=examples(1000))
@given(any_shards)
def test_native_decode_of_id_lists_matches_the_reference_for_any_shards(
    shards: list[bytes],
) -> None:
    assert outcome(decode_ids, shards) == outcome(
        lambda chunks: decode_reference(chunks, ids=True), shards
    )


@given(
    st.lists(
        st.builds(
            lambda add, member, pos: ("+" if add else "-") + member + f"#{pos:x} ",
            st.booleans(),
            members.filter(str.isascii),
            st.integers(0, 2**64 - 1),
        ),
        max_size=40,
    )
)
def test_the_core_decides_every_list_writers_write(tokens: list[str]) -> None:
    assert core is not None
    data = "".join(tokens).encode("ascii")
    native = core.decode_list([data], False)
    assert native is not None
    assert DecodedList(*native) == decode_reference([data])


def attempt(make: Callable[[], object]) -> tuple[str, object]:
    try:
        return ("made", make())
    except (ValueError, ValidationError) as exc:  # the model's and the key space's refusals
        return ("refused", str(exc))


@settings(max_examples=examples(300))
@given(shard_lists, st.integers(1, 6), st.sampled_from(list(ListKind)), st.integers(0, 2**40))
def test_decoded_members_pass_on_as_the_references_set(
    shards: list[bytes], size: int, kind: ListKind, ts: int
) -> None:
    try:
        members = in_sequence(decode(list(shards)).members)
    except CorruptList:
        return
    listed = list(members)  # what the reference's set gives the fan-out, in the same order
    assert frozenset(listed) == decode_reference(list(shards)).members
    for chunk, start in enumerate(range(0, len(listed), size)):
        passed_on(members[start : start + size], listed[start : start + size], ts, chunk, kind)


def passed_on(
    part: Sequence[str], reference: list[str], ts: int, chunk: int, kind: ListKind
) -> None:
    """One chunk of the members built into a task, written and read back, and named as keys,
    against the reference's chunk of ``str``s."""
    assert part == reference and list(part) == reference
    native = attempt(lambda: fanout_task("a", "p1", ts, chunk, part))
    model = attempt(
        lambda: FanoutTask(
            type="fanout_task",
            author="a",
            post_id="p1",
            post_ts=ts,
            chunk=chunk,
            followers=reference,
        )
    )
    assert native == model
    keys = KeySpace("tf.ns")
    assert attempt(lambda: keys.list_keys(kind, part)) == attempt(
        lambda: keys.user_keys_reference(kind.value, reference)
    )
    if native[0] == "made":
        assert isinstance(native[1], FanoutTask)
        task = native[1].with_envelope()
        assert isinstance(task, FanoutTask)
        data = encode_event(task)
        assert data == encode_event_reference(task.model_copy(update={"followers": reference}))
        assert decode_event(data) == decode_event_reference(data)


def result(op: Callable[[Any], object], subject: object) -> tuple[str, object]:
    """What ``op`` gives on ``subject``: its value (the core's types as the reference's: a
    ``MemberList`` as its list, ``Members`` as their ``frozenset``) or its error's type."""
    assert core is not None
    try:
        value = op(subject)
    except Exception as exc:  # the error's type is what is compared
        return ("raised", type(exc))
    if isinstance(value, core.MemberList):
        return ("value", list(value))
    if isinstance(value, core.Members):
        return ("value", frozenset(value))
    return ("value", value)


def answer(op: Callable[[Any, Any], object], subject: object, other: object) -> object:
    """``result`` of ``op(subject, other)``."""
    return result(lambda s: op(s, other), subject)


OTHERS: list[object] = [
    [],
    ["a"],
    ["a", "b"],
    ("a",),
    {"a"},
    frozenset(),
    {"a": 1}.keys(),
    {"a": 1}.items(),
    "a",
    7,
    None,
]
# What a list of ``str`` answers, applied to each of ``OTHERS`` where an operation takes one.
LIST_OPS: list[Callable[[Any, Any], object]] = [
    lambda s, o: s == o,
    lambda s, o: s != o,
    lambda s, o: s < o,
    lambda s, o: s <= o,
    lambda s, o: s > o,
    lambda s, o: s >= o,
    lambda s, o: o == s,
    lambda s, o: s + o,
    lambda s, o: o + s,
    lambda s, o: o in s,
    lambda s, o: s.index(o),
    lambda s, o: s.count(o),
    lambda s, o: s[o],
    lambda s, o: s & o,
    lambda s, o: s.union(o),
    lambda s, o: hash(s),
    lambda s, o: s.copy(),
    lambda s, o: copy.deepcopy(s),
    lambda s, o: pickle.loads(pickle.dumps(s)),
    lambda s, o: isinstance(s, AbstractSet),
    lambda s, o: isinstance(s, Sequence),
    lambda s, o: list(reversed(s)),
    lambda s, o: bool(s),
]
# What a ``frozenset`` of ``str`` answers, the same way.
SET_OPS: list[Callable[[Any, Any], object]] = [
    *LIST_OPS,
    lambda s, o: s | o,
    lambda s, o: o | s,
    lambda s, o: s - o,
    lambda s, o: o - s,
    lambda s, o: s ^ o,
    lambda s, o: s.intersection(o),
    lambda s, o: s.difference(o),
    lambda s, o: s.symmetric_difference(o),
    lambda s, o: s.issubset(o),
    lambda s, o: s.issuperset(o),
    lambda s, o: s.isdisjoint(o),
    lambda s, o: hash(s) == hash(frozenset(s)),
    lambda s, o: {s: 1}.get(frozenset(s)),
]


@given(
    st.lists(st.text(alphabet="ab:_-", min_size=1, max_size=4), max_size=12),
    st.lists(st.sampled_from(OTHERS) | st.integers(-15, 15) | st.just(2**70), max_size=4),
    st.lists(
        st.tuples(
            st.none() | st.integers(-15, 15),
            st.none() | st.integers(-15, 15),
            st.none() | st.integers(-4, 4).filter(bool),
        ),
        max_size=6,
    ),
)
def test_member_lists_behave_as_the_list_of_their_strs(
    ids: list[str], others: list[object], slices: list[tuple[int | None, int | None, int | None]]
) -> None:
    """A ``MemberList`` (a decode put in order, a task's followers read back, one rebuilt from
    ``str``s) answers every operation as the list of its ``str``s does, or raises the same."""
    assert core is not None
    decoded = core.decode_list(["".join(f"+{m} " for m in ids).encode("ascii")], False)
    assert decoded is not None
    kept = list(dict.fromkeys(ids))  # a decode keeps each member once, in order
    for members, reference in [(decoded[0].in_order(), kept), (core.MemberList(ids), ids)]:
        assert (list(members), len(members)) == (reference, len(reference))
        for other in [*others, *reference[:2], members]:
            for op in LIST_OPS:
                mirrored = reference if other is members else other
                assert answer(op, members, other) == answer(op, reference, mirrored)
        for start, stop, step in slices:
            assert list(members[start:stop:step]) == reference[start:stop:step]


@given(
    st.lists(st.sampled_from("abcdef")),
    st.lists(st.sets(st.sampled_from("abcxyz")) | st.sampled_from(OTHERS), max_size=4),
)
def test_members_behave_as_the_set_of_their_strs(ids: list[str], others: list[object]) -> None:
    """``Members`` (a decode's, one rebuilt from ``str``s) answer every operation as the
    ``frozenset`` of their ``str``s does, or raise the same; two decodes of one set are equal."""
    assert core is not None
    decoded = core.decode_list(["".join(f"+{m} " for m in ids).encode("ascii")], False)
    backwards = core.decode_list(["".join(f"+{m} " for m in reversed(ids)).encode("ascii")], False)
    assert decoded is not None and backwards is not None
    assert backwards[0] == decoded[0] and hash(backwards[0]) == hash(decoded[0])
    same = frozenset(ids)
    for members in [decoded[0], core.Members(ids)]:
        assert sorted(members) == sorted(same) and len(members) == len(same)
        for other in [*others, members]:
            for op in SET_OPS:
                mirrored = same if other is members else other
                assert answer(op, members, other) == answer(op, same, mirrored)


@given(
    st.sampled_from(list(ListKind)),
    st.sampled_from([None, 7, "ab", b"ab", ["a", None], ("a", "b")]),
)
def test_keys_are_refused_as_the_reference_refuses_them(kind: ListKind, users: object) -> None:
    keys = KeySpace("tf.ns")
    assert result(lambda u: keys.list_keys(kind, u), users) == result(
        lambda u: keys.user_keys_reference(kind.value, u), users
    )


def attempt_index(seq: Sequence[str], at: int) -> tuple[str, object]:
    try:
        return ("item", seq[at])
    except IndexError:
        return ("out of range", None)
