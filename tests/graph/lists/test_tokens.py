"""The token codec against a model of positioned last-writer-wins sets, for any tokens."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timeline_fanout.graph.lists.tokens import (
    CorruptList,
    CorruptMember,
    Token,
    UnsafeMember,
    _winners,
    compact_shards,
    decode,
    decode_reference,
    encode,
    encode_members,
    parse_token,
    token,
)
from timeline_fanout.graph.timelines.entries import TimelineEntry

Op = tuple[bool, str, int]

members = st.sampled_from(["a", "b", "c", "a-b", "-", "x.y", "u:1", "q@r", "-a", "a--"])
# Few positions, so that ties (a removal and an addition at one position) come up often.
positions = st.integers(min_value=0, max_value=12)
ops = st.lists(st.tuples(st.booleans(), members, positions), max_size=60)
cuts = st.lists(st.integers(min_value=0, max_value=100), max_size=5)
# Timeline entries: "{ts}!{author}!{post_id}", add-only in practice, no position.
entries = st.builds(
    "{:013d}!{}!{}".format,
    st.integers(min_value=0, max_value=30),
    st.sampled_from(["a", "b-c", "d@e"]),
    st.sampled_from(["p1", "p2"]),
)


def model(sequence: list[Op]) -> set[str]:
    """Per member the greatest position wins; a removal wins a tie; order does not matter."""
    best: dict[str, tuple[int, bool]] = {}
    for add, member, pos in sequence:
        seen = best.get(member)
        if seen is None or pos > seen[0] or (pos == seen[0] and not add):
            best[member] = (pos, add)
    return {m for m, (_, add) in best.items() if add}


def split_into_shards(data: bytes, cut_at: list[int]) -> list[bytes]:
    toks = data.split(b" ")[:-1]
    shards, start = [], 0
    for cut in [*sorted(c % (len(toks) + 1) for c in cut_at), len(toks)]:
        shards.append(b"".join(t + b" " for t in toks[start:cut]))
        start = max(start, cut)
    return shards


def unpositioned(sequence: list[tuple[bool, str]]) -> bytes:
    return b"".join(token(add, member) for add, member in sequence)


def assert_one_token_per_member(shards: list[bytes]) -> None:
    """Compacted: the deciding token of each member at most (a removal is kept, once, only
    while its member still has tokens in a later shard of the input)."""
    names = [tok[1:].partition(b"#")[0] for tok in b" ".join(shards).split()]
    assert len(names) == len(set(names))


def test_seed_examples() -> None:
    assert decode([b"+a#1 +b#2 +c#3 -b#4 "]).members == {"a", "c"}
    assert decode([b"-b#4 +a#1 +b#2 "]).members == {"a"}  # the newer removal landed first
    assert decode([b"+a#5 -a#5 "]).members == decode([b"-a#5 +a#5 "]).members == set()
    assert decode([b"+a#5 -a#4 "]).members == {"a"}  # an older removal landing late loses
    assert decode([b"+a-b#a "]).members == {"a-b"}
    assert decode([b"+e1 +e2 -e1 "]).members == {"e2"}  # unpositioned: position 0
    assert decode([b"-e1 +e1 "]).members == set()  # ... so a removal wins whatever the order


def test_token_bytes() -> None:
    assert token(True, "u1") == b"+u1 "
    assert token(False, "u1") == b"-u1 "
    assert token(True, "u1", 31) == b"+u1#1f "
    assert token(False, "u-1", 0) == b"-u-1#0 "
    assert encode([(True, "a", 1), (False, "b", 16)]) == b"+a#1 -b#10 "


@given(ops)
def test_decode_equals_the_model(sequence: list[Op]) -> None:
    decoded = decode([encode(sequence)])
    assert decoded.members == model(sequence)
    assert decoded.tokens == len(sequence)
    assert decoded.dead == len(sequence) - len(model(sequence))


@given(st.data(), ops, cuts)
def test_append_order_is_irrelevant(
    data: st.DataObject, sequence: list[Op], cut_at: list[int]
) -> None:
    """Any permutation of the same tokens, split over shards anyhow, decodes to the same set:
    a replay, a zombie or a racing partition may append in any order."""
    shuffled = data.draw(st.permutations(sequence))
    original = decode([encode(sequence)])
    permuted = decode(split_into_shards(encode(shuffled), cut_at))
    assert permuted == original
    assert permuted.members == model(sequence)


@given(st.data(), st.lists(st.tuples(st.booleans(), entries), max_size=40))
def test_append_order_is_irrelevant_for_unpositioned_tokens(
    data: st.DataObject, sequence: list[tuple[bool, str]]
) -> None:
    shuffled = data.draw(st.permutations(sequence))
    assert decode([unpositioned(shuffled)]) == decode([unpositioned(sequence)])


@given(ops, cuts, st.integers(min_value=0, max_value=7), ops)
def test_compaction_of_any_prefix_of_shards_keeps_the_set(
    sequence: list[Op], cut_at: list[int], stop_at: int, later: list[Op]
) -> None:
    """Shards are rewritten in order and the rewrite stops at the first lost CAS race, so any
    prefix of them may be rewritten: the list must decode as before. New writes (positions
    greater than all before) may then land in the newest shard."""
    shards = split_into_shards(encode(sequence), cut_at)
    compacted = compact_shards(shards)
    assert len(compacted) == len(shards)
    mixed = compacted[:stop_at] + shards[stop_at:]
    assert decode(mixed).members == decode(shards).members == model(sequence)
    assert_one_token_per_member(compacted)
    assert decode(compact_shards(compacted)).dead == 0  # a kept removal goes on the next pass
    newer = [(add, member, pos + 13) for add, member, pos in later]
    mixed[-1] += encode(newer)
    assert decode(mixed).members == model(sequence + newer)


@given(st.data(), ops, cuts)
def test_compaction_after_a_shuffle_keeps_the_set(
    data: st.DataObject, sequence: list[Op], cut_at: list[int]
) -> None:
    """The deciding token may sit in any shard, before or after the tokens it beats."""
    shards = split_into_shards(encode(data.draw(st.permutations(sequence))), cut_at)
    compacted = compact_shards(shards)
    for stop_at in range(len(shards) + 1):
        assert decode(compacted[:stop_at] + shards[stop_at:]).members == model(sequence)


def test_a_stale_addition_after_compaction_is_answered_by_the_confirming_removal() -> None:
    """Compaction drops a removal with nothing of its member after it, so a stale addition
    appended later revives the member until the graph applier's confirmation appends the
    removal again (consumers/graph_apply.py): the codec's side of that contract."""
    compacted = compact_shards([b"+a#3 -a#9 +b#4 ", b"+c#5 "])
    assert compacted == [b"+b#4 ", b"+c#5 "]
    assert decode([*compacted, b"+a#7 "]).members == {"a", "b", "c"}
    assert decode([*compacted, b"+a#7 -a#9 "]).members == {"b", "c"}
    # A removal with a superseded addition in a later shard is kept where it is.
    assert compact_shards([b"-a#9 ", b"+a#7 +b#1 "]) == [b"-a#9 ", b"+b#1 "]


@given(
    st.lists(st.tuples(st.booleans(), entries), max_size=50),
    cuts,
    st.integers(min_value=0, max_value=6),
    st.integers(min_value=0, max_value=6),
)
def test_capped_compaction_keeps_the_greatest_members_of_any_prefix(
    sequence: list[tuple[bool, str]], cut_at: list[int], cap: int, stop_at: int
) -> None:
    """Timelines: unpositioned tokens and a cap. Rewritten whole, the list holds its ``cap``
    greatest members; rewritten in part, it still holds those, and nothing it did not hold."""
    shards = split_into_shards(unpositioned(sequence), cut_at)
    before = decode(shards).members
    top = set(sorted(before)[max(len(before) - cap, 0) :])
    compacted = compact_shards(shards, cap)
    assert decode(compacted).members == top
    assert_one_token_per_member(compacted)
    partly = decode(compacted[:stop_at] + shards[stop_at:]).members
    assert top <= partly <= before
    (whole,) = compact_shards([b"".join(shards)], cap)  # a timeline is one item
    assert decode([whole]).members == top
    assert decode([whole]).dead == 0


def test_corrupt_bytes_are_reported_not_guessed() -> None:
    with pytest.raises(CorruptList):
        decode([b"+a garbage "])
    with pytest.raises(CorruptList):
        decode([b"+a#1 -b#zz "])
    with pytest.raises(CorruptList):
        compact_shards([b"+a", b"*b "])
    with pytest.raises(CorruptList):
        compact_shards([b"+a#1 +b#x1 "])


@pytest.mark.parametrize(
    "shards",
    [[b"+a#1 -b#2 +ghost#ff"], [b"+a#1 +b#2 +ghost"], [b"+a +ghost"], [b"+a#1 ", b"+ghost"]],
)
def test_a_token_without_its_space_is_corrupt_not_a_member(shards: list[bytes]) -> None:
    """Every token a writer appends ends with a space: a shard ending otherwise holds bytes no
    writer wrote, and its last token must not count as a member (natively or not)."""
    for read in (decode, decode_reference):
        with pytest.raises(CorruptList):
            read(shards)


@pytest.mark.parametrize("bad", [b"+a#zz ", b"+a#1#2 ", b"+a#1F "])
def test_a_malformed_position_never_becomes_part_of_a_member(bad: bytes) -> None:
    """Members never hold ``#``: a token with a malformed position is reported as corrupt
    (the list is rebuilt), or read as the general case reads it, never as member ``a#zz``."""
    try:
        found = decode([bad]).members
    except CorruptList:
        return
    assert not any("#" in member for member in found)


@pytest.mark.parametrize("evil", ["a +b", "a\n-b", "a\r\nb", "a\x01", "", "ü", "a\tb", "a#1", "#"])
def test_a_member_that_could_carry_a_delimiter_is_refused(evil: str) -> None:
    with pytest.raises(UnsafeMember):
        token(True, evil)
    with pytest.raises(UnsafeMember):
        token(False, evil, 3)
    with pytest.raises(UnsafeMember):
        encode_members(["ok", evil])
    with pytest.raises(UnsafeMember):
        encode_members([evil], [1])


@given(st.lists(st.tuples(st.just(True), members, positions), max_size=60), cuts)
def test_the_add_only_fast_path_agrees_with_the_general_case(
    sequence: list[Op], cut_at: list[int]
) -> None:
    shards = split_into_shards(encode(sequence), cut_at)
    fast = decode(shards)
    assert fast.members == frozenset(_winners(b" ".join(shards).split()))
    assert fast.members == model(sequence)
    assert fast.tokens == len(sequence)


@given(
    st.lists(st.tuples(members | st.text(max_size=8), positions), max_size=20),
)
def test_bulk_member_encoding_is_encode_of_additions_with_the_same_guard(
    candidates: list[tuple[str, int]],
) -> None:
    names = [m for m, _ in candidates]
    at = [p for _, p in candidates]
    try:
        expected: tuple[bytes, bytes] | None = (
            b"".join(token(True, m) for m in names),
            encode((True, m, p) for m, p in candidates),
        )
    except UnsafeMember:
        expected = None
    if expected is None:
        with pytest.raises(UnsafeMember):
            encode_members(names)
        with pytest.raises(UnsafeMember):
            encode_members(names, at)
    else:
        assert encode_members(names) == expected[0]
        assert encode_members(names, at) == expected[1]
        assert decode([expected[1]]).members == set(names)


@given(ops)
def test_a_parsed_token_names_what_its_writer_encoded(changes: list[Op]) -> None:
    parsed = [parse_token(tok) for tok in encode(changes).split()]
    assert parsed == [Token(m.encode(), pos, add) for add, m, pos in changes]


@pytest.mark.parametrize("member", ["1700000000000!a", "x!a!p1", "1700000000000!a!p!q"])
def test_a_timeline_member_not_of_our_form_is_a_corrupt_member(member: str) -> None:
    with pytest.raises(CorruptMember):
        TimelineEntry.parse(member)
