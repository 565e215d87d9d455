"""``params.query`` splits plain query strings itself: it must read exactly what Starlette's
``request.query_params`` reads, for any query string."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from starlette.requests import Request

from timeline_fanout.api.params import query

PIECES = st.sampled_from(["limit", "cursor", "=", "&", "50", "%3D", "+", "a", "", "&&", "é"])


def request(raw: bytes) -> Request:
    return Request({"type": "http", "query_string": raw, "headers": []})


@given(st.lists(PIECES, max_size=12).map("".join))
def test_the_query_is_read_as_starlette_reads_it(text: str) -> None:
    raw = text.encode("utf-8")
    assert query(request(raw)) == dict(request(raw).query_params)
