"""The native meta protocol passes have the reference's meaning: for any reply stream, in
memcached's form, cut anywhere or corrupt, ``take_values`` (the native core, handing back what
it does not decide) takes the same items, stops at the same position asking for the same bytes,
or raises the same error as ``take_values_reference``; ``KeySpace.families`` names any batch's
families as ``families_reference`` does, ``winners`` places any batch of families (and
``place`` any batch of keys under them) as ``winners_reference`` does, for nodes of any name,
and ``by_owner`` splits any batch as
``by_owner_reference`` does. Each also checks that the core decides what memcached writes, every
batch of keys and every batch a placement splits, itself."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.property_budget import examples
from timeline_fanout.graph.model.keys import KeySpace
from timeline_fanout.memcache.ring import MOVED, place, winners, winners_reference
from timeline_fanout.memcache.router import by_owner, by_owner_reference
from timeline_fanout.memcache.wire import Item, take_values, take_values_reference
from timeline_fanout.native_core import core

pytestmark = pytest.mark.skipif(
    core is None, reason="the native core is not built here, or FANOUT_NATIVE=0"
)

Taken = tuple[str, object, list[object], list[type]]

values = st.binary(max_size=12) | st.sampled_from([b"\r\n", b"EN\r\n", b"VA 1 c1 t1\r\n"])
cas_ids = st.integers(0, 2**64 - 1).map(b"%d".__mod__)
ttls = st.sampled_from([b"-1", b"0", b"7", b"2592000", b"999999999999999999"])


def hit(value: bytes, cas: bytes, ttl: bytes, writable: bool) -> bytes:
    flags = b" c%s t%s" % (cas, ttl) if writable else b""
    return b"VA %d%s\r\n%s\r\n" % (len(value), flags, value)


def reply_lists(writable: bool) -> st.SearchStrategy[list[bytes]]:
    """Replies as memcached writes them for ``mg key v c t`` (or ``mg key v``)."""
    hits = st.builds(hit, values, cas_ids, ttls, st.just(writable))
    return st.lists(st.one_of(hits, st.just(b"EN\r\n")), max_size=8)


def replies(writable: bool) -> st.SearchStrategy[bytes]:
    return reply_lists(writable).map(b"".join)


# Lines out of memcached's form: other flags and separators, signs, underscores, leading zeros,
# lengths past any buffer, other replies, stray bytes and non-ASCII.
corrupt = st.sampled_from(
    [
        b"VA 2 c1 t+1\r\nab\r\n",
        b"VA 2 c1 t1_0\r\nab\r\n",
        b"VA 2 c1 t-0\r\nab\r\n",
        b"VA 2 c1 t\r\nab\r\n",
        b"VA 2 c t-1\r\nab\r\n",
        b"VA 002 c1 t1\r\nab\r\n",
        b"VA 2\tc1\x0bt1 \r\nab\r\n",
        b"VA 2 x1 t1\r\nab\r\n",
        b"VA 2 c1\r\nab\r\n",
        b"VA 2 c1 t1 f0\r\nab\r\n",
        b"VA -2 c1 t1\r\n",
        b"VA 99999999999999999999 c1 t1\r\n",
        b"VA \xd9\xa3 c1 t1\r\n",
        b"VA 2\r\nab\r\n",
        b"EN \r\n",
        b"HD\r\n",
        b"SERVER_ERROR out of memory\r\n",
        b"\r",
        b"\n",
        b"\xff",
    ]
)


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, bool]:
    writable = draw(st.booleans())
    parts = draw(st.lists(st.one_of(replies(writable), replies(not writable), corrupt)))
    data = b"".join(parts)
    return data[: draw(st.integers(0, len(data)))], writable


def taken(parse: object, buf: bytes, pos: int, count: int, writable: bool, stamp: bytes) -> Taken:
    assert callable(parse)
    found: list[Item | None] = []
    try:
        result = parse(buf, pos, count, found, writable, stamp)
    except ValueError as exc:
        result = ("error", str(exc))
    return ("taken", result, list(found), [type(item) for item in found])


@settings(max_examples=examples(2000))
@given(streams(), st.integers(-3, 3), st.integers(0, 12), st.sampled_from([b"", b"/1", b"/42"]))
def test_native_take_values_matches_the_reference_for_any_replies(
    stream: tuple[bytes, bool], start: int, count: int, stamp: bytes
) -> None:
    buf, writable = stream
    pos = start if start <= 0 else min(start, len(buf) + 1)
    native = taken(take_values, buf, pos, count, writable, stamp)
    assert native == taken(take_values_reference, buf, pos, count, writable, stamp)


@given(st.booleans().flatmap(lambda w: st.tuples(st.just(w), reply_lists(w))))
def test_the_core_takes_every_reply_memcached_writes(stream: tuple[bool, list[bytes]]) -> None:
    writable, written = stream
    buf = b"".join(written)
    assert core is not None
    found: list[Item | None] = []
    reference: list[Item | None] = []
    taken = core.take_values(buf, 0, len(written), found, writable, b"/1", Item)
    assert taken == (len(buf), 0)
    take_values_reference(buf, 0, len(written), reference, writable, b"/1")
    assert found == reference


owners = st.integers(-1, 3) | st.sampled_from([MOVED, 2**70, -(2**70), True])
columns = st.lists(st.binary(max_size=3), max_size=20)


@given(
    st.lists(owners, max_size=20),
    st.integers(-2, 4),
    columns | columns.map(tuple),
)
def test_native_by_owner_matches_the_reference_for_any_batch(
    owned: list[int], count: int, column: list[bytes]
) -> None:
    assert by_owner(owned, count, column) == by_owner_reference(owned, count, column)


@given(st.integers(1, 4).flatmap(lambda n: st.tuples(st.just(n), st.lists(st.integers(-1, n)))))
def test_the_core_splits_every_placed_batch(batch: tuple[int, list[int]]) -> None:
    count, owned = batch
    column = [b"k%d" % i for i in range(len(owned))]
    assert core is not None
    assert core.by_owner(owned, count, column) == by_owner_reference(owned, count, column)


# Node names of every length modulo 4: the core hashes a node's prefix through its whole
# blocks once and carries on from there with each key.
rings = st.lists(
    st.sampled_from(["127.0.0.1:11211", "127.0.0.1:11212", "10.0.0.3:1", "m4:11211", "x"])
    | st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=24),
    min_size=1,
    max_size=4,
    unique=True,
).map(sorted)
placed_keys = st.lists(
    st.lists(st.sampled_from([b"|", b"tf", b"tl", b"f1", b"\xff", b"\x00", b"-"]), max_size=9).map(
        b"".join
    ),
    max_size=20,
)


def placed(ring: list[str], keys: object) -> tuple[str, object]:
    try:
        return ("owners", winners(ring, KeySpace.families(keys)))  # type: ignore[arg-type]
    except TypeError as exc:
        return ("error", str(exc))


def placed_at_once(ring: list[str], keys: object) -> tuple[str, object]:
    try:
        return ("owners", place(ring, keys, KeySpace.families))  # type: ignore[arg-type]
    except TypeError as exc:
        return ("error", str(exc))


def placed_reference(ring: list[str], keys: object) -> tuple[str, object]:
    try:
        families = KeySpace.families_reference(keys)  # type: ignore[arg-type]
        return ("owners", winners_reference(ring, families))
    except TypeError as exc:
        return ("error", str(exc))


def named(keys: object, families: object) -> tuple[str, object]:
    try:
        return ("families", families(keys))  # type: ignore[operator]
    except TypeError as exc:
        return ("error", str(exc))


@given(placed_keys | placed_keys.map(tuple) | placed_keys.map(lambda keys: [*keys, "tf|tl|f1"]))
def test_native_families_match_the_reference_for_any_keys(keys: object) -> None:
    native = named(keys, KeySpace.families)
    assert native == named(keys, KeySpace.families_reference)
    if isinstance(keys, list) and native[0] == "families":
        assert core is not None and core.families(keys) is not None  # decided by the core


@given(
    rings,
    placed_keys | placed_keys.map(tuple) | placed_keys.map(lambda keys: [*keys, "tf|tl|f1"]),
)
def test_native_winners_match_the_reference_for_any_keys(ring: list[str], keys: object) -> None:
    assert placed(ring, keys) == placed_reference(ring, keys)
    assert placed_at_once(ring, keys) == placed_reference(ring, keys)


@given(rings, placed_keys)
def test_the_core_places_every_batch_of_keys(ring: list[str], keys: list[bytes]) -> None:
    assert core is not None
    prefixes = [node.encode("ascii") + b"-" for node in ring]
    families = KeySpace.families_reference(keys)
    assert core.winners(prefixes, families) == winners_reference(ring, families)
    assert core.place(prefixes, keys) == winners_reference(ring, families)
