"""The page memo's bound, measured as what the process really holds (tracemalloc), with the
shapes the fourth adversarial review used to overrun it: tiny bodies from orjson (whose buffer
outlived them at ~4 KiB each) and validators with hundreds of small items."""

from __future__ import annotations

import tracemalloc

import orjson

from graph.async_cache import Versioned
from graph.memcache_pipe import Item
from graph.page_memo import PageMemo
from graph.timeline_fetch import Remembered
from graph.warm_reads import _validator

BUDGET = 1 << 18


def test_what_a_full_memo_holds_stays_near_its_budget() -> None:
    keys = [b"k%d" % i for i in range(200)]
    last = Remembered(b"gen +0 ", ("star",), tuple(keys))
    memo = PageMemo(BUDGET)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        found = {k: Item(b"a small value", b"7", -1) for k in keys}
        for i in range(3_000):
            validated = _validator(last, keys, Versioned(found, (1, i)))
            assert validated is not None
            body = orjson.dumps({"user": "me", "posts": [], "next": None, "i": i})
            memo.put(("me", 1 + i % 1000, f"c{i}"), *validated, body)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held <= 1.5 * BUDGET, held
    assert memo.get(("me", 1, "c0"), None) is None  # the oldest went first


def test_a_page_is_answered_only_under_the_validator_it_was_kept_with() -> None:
    memo = PageMemo(BUDGET)
    memo.put(("me", 50, None), ("v", 1), 10, b"page")
    assert memo.get(("me", 50, None), ("v", 1)) == b"page"
    assert memo.get(("me", 50, None), ("v", 2)) is None
    assert memo.get(("me", 49, None), ("v", 1)) is None
    memo.put(("big", 50, None), ("v", 1), 10, b"x" * BUDGET)  # larger than the whole memo
    assert memo.get(("big", 50, None), ("v", 1)) is None
