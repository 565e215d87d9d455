"""The page memo's bound, measured as what the process really holds (tracemalloc), with the
shapes that would overrun a count of bodies alone: tiny bodies from orjson (whose buffer
outlived them at ~4 KiB each) and many small replies."""

from __future__ import annotations

import tracemalloc

import orjson

from timeline_fanout.graph.timelines.fetch import Remembered
from timeline_fanout.graph.timelines.page_memo import PageMemo
from timeline_fanout.memcache.async_cluster import Replies

BUDGET = 1 << 18


def test_what_a_full_memo_holds_stays_near_its_budget() -> None:
    keys = tuple(b"k%d" % i for i in range(200))
    last = Remembered(b"gen +0 ", ("star",), keys)
    memo = PageMemo(BUDGET)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(3_000):
            raw = tuple(b"VA 13 c%d\r\na small value\r\n" % (i * 7 + j) for j in range(7))
            body = orjson.dumps({"user": "me", "posts": [], "next": None, "i": i})
            memo.put(("me", 1 + i % 1000, f"c{i}"), last, Replies(keys, raw, {}), body)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held <= 1.5 * BUDGET, held
    assert memo.get(("me", 1, "c0")) is None  # the oldest went first


def test_a_page_is_kept_with_what_it_was_read_from_and_the_largest_are_not_kept() -> None:
    memo = PageMemo(BUDGET)
    keys = (b"k",)
    memo.put(("me", 50, None), "last", Replies(keys, (b"EN\r\n",), {}), b"page")
    kept = memo.get(("me", 50, None))
    assert kept is not None and (kept.last, kept.replies, kept.body) == (
        "last",
        Replies(keys, (b"EN\r\n",), None),  # the bytes, not the items
        b"page",
    )
    assert memo.get(("me", 49, None)) is None
    memo.put(("big", 50, None), "last", Replies(keys, (b"x" * BUDGET,), None), b"page")
    assert memo.get(("big", 50, None)) is None
