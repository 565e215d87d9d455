"""The native list decode has the reference's meaning: for any shards, well-formed or corrupt,
``decode`` (the native core, handing back what it does not decide) gives the same members and
token count as ``decode_reference``, or the same ``CorruptList`` with the same reason; and the
core decides every list our writers write itself. The members it gives (``Members``, no
``str`` per member) behave as the list of their ``str``s, and passed on as the fan-out passes
them (cut into chunk tasks, written, read back, named as timeline keys) give the reference's
tasks, bytes and keys, or its errors."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from timeline_fanout.graph.lists.tokens import (
    CorruptList,
    DecodedList,
    decode,
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

members = st.sampled_from(["a", "b", "a-b", "-", "x.y", "u:1", "q@r", "-a", "0001!a!p1", "é"])
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
streams = st.lists(st.one_of(written, written, pieces), max_size=40).map(
    lambda parts: "".join(parts).encode("latin-1")
)
shard_lists = st.lists(streams, max_size=4)


def outcome(decoder: object, shards: list[bytes]) -> Outcome:
    assert callable(decoder)
    try:
        decoded = decoder(list(shards))
    except CorruptList as exc:
        return ("corrupt", str(exc), None)
    assert isinstance(decoded, DecodedList)
    members = decoded.members
    return ("decoded", frozen(members), len(members), sorted(members), decoded.tokens)


@settings(max_examples=2000)
@given(shard_lists)
def test_native_decode_matches_the_reference_for_any_shards(shards: list[bytes]) -> None:
    assert outcome(decode, shards) == outcome(decode_reference, shards)


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
    native = core.decode_list([data])
    assert native is not None
    assert DecodedList(*native) == decode_reference([data])


def attempt(make: Callable[[], object]) -> tuple[str, object]:
    try:
        return ("made", make())
    except (ValueError, ValidationError) as exc:  # the model's and the key space's refusals
        return ("refused", str(exc))


@settings(max_examples=300)
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


@given(
    st.lists(st.text(alphabet="ab:_-", min_size=1, max_size=4), unique=True, max_size=12),
    st.lists(st.integers(-15, 15), max_size=6),
    st.lists(
        st.tuples(
            st.none() | st.integers(-15, 15),
            st.none() | st.integers(-15, 15),
            st.none() | st.integers(-4, 4).filter(bool),
        ),
        max_size=6,
    ),
)
def test_members_behave_as_the_list_of_their_strs(
    ids: list[str], indices: list[int], slices: list[tuple[int | None, int | None, int | None]]
) -> None:
    assert core is not None
    decoded = core.decode_list(["".join(f"+{m} " for m in ids).encode("ascii")])
    assert decoded is not None
    members: Sequence[str] = decoded[0]
    assert (list(members), len(members)) == (ids, len(ids))
    assert members == ids and members == tuple(ids) and members == set(ids)
    assert members != [*ids, "x"] and members != {"x"} and members != "".join(ids)
    assert all(m in members for m in ids) and "x" not in members and 7 not in members
    for at in indices:
        assert attempt_index(members, at) == attempt_index(ids, at)
    for start, stop, step in slices:
        assert list(members[start:stop:step]) == ids[start:stop:step]
    assert sorted(frozen(decoded[0])) == sorted(ids)


@given(
    st.lists(st.sampled_from("abcdef"), unique=True),
    st.sets(st.sampled_from("abcxyz")),
)
def test_members_behave_as_the_set_of_their_strs(ids: list[str], other: set[str]) -> None:
    assert core is not None
    decoded = core.decode_list(["".join(f"+{m} " for m in ids).encode("ascii")])
    assert decoded is not None
    members, same = decoded[0], frozenset(ids)
    backwards = core.decode_list(["".join(f"+{m} " for m in reversed(ids)).encode("ascii")])
    assert backwards is not None and backwards[0] == members  # two decodes of one set
    assert (members == other, members != other) == (same == other, same != other)
    assert (members <= other, members < other, members >= other, members > other) == (
        same <= other,
        same < other,
        same >= other,
        same > other,
    )
    assert (members & other, members | other, members - other, members ^ other) == (
        same & other,
        same | other,
        same - other,
        same ^ other,
    )
    assert (other & members, other | members, other - members, other ^ members) == (
        other & same,
        other | same,
        other - same,
        other ^ same,
    )
    assert members.isdisjoint(other) == same.isdisjoint(other)


def attempt_index(seq: Sequence[str], at: int) -> tuple[str, object]:
    try:
        return ("item", seq[at])
    except IndexError:
        return ("out of range", None)
