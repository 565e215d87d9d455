"""The fan-out's bounded steps: waves of appends between pulses."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from timeline_fanout.consumers.fanout_apply import waves
from timeline_fanout.graph.lists.token_lists import Delivery

deliveries = st.lists(
    st.builds(
        Delivery,
        st.binary(min_size=1, max_size=3),
        st.lists(st.text("abc", max_size=2), max_size=9),
    )
)


@given(deliveries, st.integers(1, 7))
def test_waves_cut_deliveries_into_steps_of_at_most_size_appends_and_lose_none(
    given_deliveries: list[Delivery], size: int
) -> None:
    cut = list(waves(given_deliveries, size))
    assert all(0 < sum(len(f) for _, f in wave) <= size for wave in cut)
    flat = [(tok, f) for wave in cut for tok, part in wave for f in part]
    assert flat == [(tok, f) for tok, followers in given_deliveries for f in followers]
