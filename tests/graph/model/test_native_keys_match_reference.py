"""Native key naming has the reference's meaning: for any batch of users, valid or not, the
keys ``KeySpace`` names through the native core are the reference's, and a batch with an
invalid id fails with the reference's error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timeline_fanout.graph.model.keys import KeySpace, ListKind
from timeline_fanout.native_core import core

pytestmark = pytest.mark.skipif(
    core is None, reason="the native core is not built here, or FANOUT_NATIVE=0"
)

valid = st.text(alphabet="AZaz09_.:@-", min_size=1, max_size=64)
invalid = st.one_of(
    st.just(""),
    st.text(alphabet="ab", min_size=65, max_size=70),
    st.sampled_from(["a b", "a\n", "é", "a+b", "a|b", "\ud800", "a\x00", "#"]),
    st.sampled_from([None, 7, b"ab"]),
)
batches = st.lists(st.one_of(valid, valid, valid, invalid), max_size=30)


def outcome(name: object) -> tuple[str, object]:
    assert callable(name)
    try:
        return ("keys", name())
    except ValueError as exc:
        return ("error", str(exc))


@given(st.sampled_from(list(ListKind)), batches)
def test_native_keys_match_the_reference_for_any_batch(kind: ListKind, users: list[str]) -> None:
    keys = KeySpace("tf.ns")
    native = outcome(lambda: keys.list_keys(kind, users))
    assert native == outcome(lambda: keys.user_keys_reference(kind.value, users))


@given(st.lists(valid, max_size=30))
def test_the_core_names_every_valid_batch(users: list[str]) -> None:
    assert core is not None
    assert core.user_keys("tf|tl|", users) == KeySpace("tf").user_keys_reference("tl", users)
