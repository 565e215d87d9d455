"""The native grouping and encoding of a graph batch's tokens has the reference's meaning: for
any changes, plain or not (ids ``token`` refuses, positions outside 0..2**64, ``active`` or
``pos`` of other types, ``str`` subclasses), ``edge_tokens`` gives the same lists in the same
order with the same bytes as ``edge_tokens_reference``, or the same error with the same
message; and the core encodes every batch the graph consumer writes itself."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.property_budget import examples
from timeline_fanout.graph.lists.tokens import edge_tokens, edge_tokens_reference
from timeline_fanout.graph.model.edges import EdgeChange
from timeline_fanout.graph.model.keys import ListKind, ListRef
from timeline_fanout.native_core import core

pytestmark = pytest.mark.skipif(
    core is None, reason="the native core is not built here, or FANOUT_NATIVE=0"
)


class Sub(str):
    """A ``str`` subclass: outside the plain form, so the reference encodes it."""


valid_ids = st.sampled_from(["a", "b", "a-b", "-", "x.y", "u:1", "q@r", "-a", "_", "A9"])
odd_ids = st.one_of(
    st.sampled_from(["", "a b", "a#b", "#", "é", "a\x00", "\t", "a\nb", "\x7f", "+a", "~"]),
    st.text(max_size=4),
    valid_ids.map(Sub),
)
plain_positions = st.one_of(st.integers(0, 40), st.integers(0, 2**64 - 1))
odd_positions = st.one_of(
    st.integers(-3, -1), st.integers(2**64 - 2, 2**64 + 3), st.booleans(), st.just(1.0)
)
odd_active = st.one_of(st.integers(0, 2), st.none(), st.just("yes"))


def changes_of(ids: st.SearchStrategy[Any], pos: Any, active: Any) -> Any:
    change = st.builds(EdgeChange, ids, ids, active, pos, st.none() | st.just("g"))
    return st.lists(change, max_size=30)


plain = changes_of(valid_ids, plain_positions, st.booleans())
anything = changes_of(
    st.one_of(valid_ids, valid_ids, odd_ids),
    st.one_of(plain_positions, plain_positions, odd_positions),
    st.one_of(st.booleans(), st.booleans(), odd_active),
)


def outcome(encoder: Any, changes: list[EdgeChange]) -> tuple[str, object]:
    try:
        tokens = encoder(list(changes))
    except Exception as exc:  # the error itself is the outcome compared
        return (type(exc).__name__, str(exc))
    return ("tokens", list(tokens.items()))


@settings(max_examples=examples(600))
@given(anything)
def test_native_edge_tokens_match_the_reference_for_any_changes(
    changes: list[EdgeChange],
) -> None:
    assert outcome(edge_tokens, changes) == outcome(edge_tokens_reference, changes)


@settings(max_examples=examples(200))
@given(plain)
def test_the_core_encodes_every_batch_the_consumer_writes(changes: list[EdgeChange]) -> None:
    assert core is not None
    native = core.edge_tokens(changes, EdgeChange, ListRef, ListKind.FOLLOWERS, ListKind.FOLLOWING)
    assert native is not None
    assert list(native.items()) == list(edge_tokens_reference(changes).items())
    assert all(type(ref) is ListRef for ref in native)


def test_refs_are_list_refs_of_the_changes_users() -> None:
    tokens = edge_tokens([EdgeChange("a", "b", True, 5), EdgeChange("c", "b", False, 255, "g")])
    assert tokens == {
        ListRef(ListKind.FOLLOWERS, "b"): b"+a#5 -c#ff ",
        ListRef(ListKind.FOLLOWING, "a"): b"+b#5 ",
        ListRef(ListKind.FOLLOWING, "c"): b"-b#ff ",
    }
