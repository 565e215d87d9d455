"""The token codec against a plain set model, for any sequence of operations."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from graph.tokens import (
    CorruptList,
    UnsafeMember,
    _replay,
    compact_shards,
    decode,
    encode,
    encode_members,
    token,
)

members = st.sampled_from(["a", "b", "c", "a-b", "-", "x.y", "u:1", "q@r"])
ops = st.lists(st.tuples(st.booleans(), members), max_size=60)


def model(sequence: list[tuple[bool, str]]) -> set[str]:
    state: set[str] = set()
    for add, member in sequence:
        (state.add if add else state.discard)(member)
    return state


def split_into_shards(data: bytes, cuts: list[int]) -> list[bytes]:
    toks = data.split(b" ")[:-1]
    shards, start = [], 0
    for cut in [*sorted(c % (len(toks) + 1) for c in cuts), len(toks)]:
        shards.append(b"".join(t + b" " for t in toks[start:cut]))
        start = max(start, cut)
    return shards


def test_seed_examples() -> None:
    assert decode([b"+a +b +c -b "]).members == {"a", "c"}
    assert decode([encode([(True, "a"), (True, "b"), (False, "a"), (True, "a")])]).members == {
        "a",
        "b",
    }
    assert decode([b"+a-b "]).members == {"a-b"}


@given(ops)
def test_decode_equals_set_model(sequence: list[tuple[bool, str]]) -> None:
    decoded = decode([encode(sequence)])
    assert decoded.members == model(sequence)
    assert decoded.tokens == len(sequence)
    assert decoded.dead == len(sequence) - len(model(sequence))


@given(ops, st.lists(st.integers(min_value=0, max_value=100), max_size=5))
def test_sharding_does_not_change_the_set(
    sequence: list[tuple[bool, str]], cuts: list[int]
) -> None:
    shards = split_into_shards(encode(sequence), cuts)
    assert decode(shards).members == model(sequence)


@given(
    ops,
    st.lists(st.integers(min_value=0, max_value=100), max_size=5),
    st.integers(min_value=0, max_value=6),
    ops,
)
def test_compaction_keeps_the_set_even_when_it_stops_early_and_appends_follow(
    sequence: list[tuple[bool, str]],
    cuts: list[int],
    stop_at: int,
    later: list[tuple[bool, str]],
) -> None:
    """Compaction may succeed for a prefix of shards only (a lost CAS stops it), and new tokens
    may land in the last shard afterwards: the set must still equal the model."""
    shards = split_into_shards(encode(sequence), cuts)
    compacted = compact_shards(shards)
    mixed = compacted[:stop_at] + shards[stop_at:]
    mixed[-1] += encode(later)
    assert decode(mixed).members == model(sequence + later)
    assert decode(compacted).dead == 0


def test_corrupt_bytes_are_reported_not_guessed() -> None:
    with pytest.raises(CorruptList):
        decode([b"+a garbage "])
    with pytest.raises(CorruptList):
        compact_shards([b"+a", b"*b "])


def test_token_bytes() -> None:
    assert token(True, "u1") == b"+u1 "
    assert token(False, "u1") == b"-u1 "


@given(
    ops,
    st.lists(st.integers(min_value=0, max_value=100), max_size=5),
    st.integers(min_value=0, max_value=5),
)
def test_capped_compaction_keeps_the_greatest_members(
    sequence: list[tuple[bool, str]], cuts: list[int], cap: int
) -> None:
    shards = split_into_shards(encode(sequence), cuts)
    expected = set(sorted(model(sequence))[-cap:]) if cap else set()
    assert decode(compact_shards(shards, cap)).members == expected


@pytest.mark.parametrize("evil", ["a +b", "a\n-b", "a\r\nb", "a\x01", "", "ü", "a\tb"])
def test_a_member_that_could_carry_a_delimiter_is_refused(evil: str) -> None:
    with pytest.raises(UnsafeMember):
        token(True, evil)


@given(
    st.lists(st.tuples(st.just(True), members), max_size=60),
    st.lists(st.integers(min_value=0, max_value=100), max_size=5),
)
def test_the_add_only_fast_path_agrees_with_replaying(
    sequence: list[tuple[bool, str]], cuts: list[int]
) -> None:
    shards = split_into_shards(encode(sequence), cuts)
    fast = decode(shards)
    assert fast == _replay(b" ".join(shards).split())
    assert fast.members == model(sequence)


@given(st.lists(members | st.text(max_size=8), max_size=20))
def test_bulk_member_encoding_is_encode_of_additions_with_the_same_guard(
    candidates: list[str],
) -> None:
    try:
        expected: bytes | None = encode((True, m) for m in candidates)
    except UnsafeMember:
        expected = None
    if expected is None:
        with pytest.raises(UnsafeMember):
            encode_members(candidates)
    else:
        assert encode_members(candidates) == expected
