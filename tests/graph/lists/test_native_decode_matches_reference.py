"""The native list decode has the reference's meaning: for any shards, well-formed or corrupt,
``decode`` (the native core, handing back what it does not decide) gives the same members and
token count as ``decode_reference``, or the same ``CorruptList`` with the same reason; and the
core decides every list our writers write itself."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from timeline_fanout.graph.lists.tokens import CorruptList, DecodedList, decode, decode_reference
from timeline_fanout.native_core import core

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
    return ("decoded", decoded.members, decoded.tokens)


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
