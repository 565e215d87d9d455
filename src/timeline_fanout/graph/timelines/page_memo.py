"""Rendered timeline pages, remembered against the replies they were read from.

A warm read of an unchanged timeline fetches the same items and walks them to the same page every
time; the walk and the rendering cost more CPU than the rest of an HTTP request
(docs/decisions/page-memo-compares-replies.md). So the event loop's reader
(graph/timelines/warm_reads.py) keeps, per page asked (user, limit, cursor), what it rendered, the
remembered read that chose its keys, and the replies of its multi-GET exactly as the servers sent
them. A later read of the same page still sends the multi-GET; when the replies are the same bytes,
it returns the rendered body without parsing them (memcache/async_cluster.py compares them as they
arrive) and without walking.

**Why the same replies mean the same page.** The keys asked are a function of the user and the
remembered read. The replies hold every value read, whole, and nothing else (no CAS id, no time to
live: memcache/async_cluster.py), so the same replies are the same items. The page is a function of
the remembered read and the items (the walk has no clock and no randomness; cap and settings are
fixed for a process). Only reads answered by their first multi-GET, and by post bodies read after
it or texts known under the mark it found (graph/timelines/post_bodies.py), are remembered here, so
the replies cover everything they read but those bodies. A body changes only from a post's text to
deleted (texts never change; an evicted body is filled with the same text), and every first
multi-GET asks the deletion mark, which each deletion sets to a value never held before, after the
body's (graph/timelines/post_bodies.py): a page that showed a post deleted since has replies with
an older mark, which no later read gets back, whatever then happens to the timeline's bytes. A page
is kept only with the mark in its replies (a read that finds none is not warm). Nothing here
depends on CAS ids or on which run of a server answered: an item rewritten with the same bytes (the
celebrity set, rebuilt every few seconds) or a restarted server holding the same bytes gives the
same page, and is one.

Bounded by the bytes held (rendered bodies copied to their size, the replies, a fixed overhead
per entry), least recently used first out. Everything held is plain tuples, bytes and strings,
which the garbage collector stops tracking: a full memo costs collections nothing. Not
thread-safe: the event loop's.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import NamedTuple

from timeline_fanout.memcache.async_cluster import Replies

PageKey = tuple[str, int, str | None]  # user, limit, cursor
# Bytes an entry holds besides its body and its replies: the key, the remembered read it shares
# with the read memory (a head and ~5 keys), the tuples, the dict slot.
ENTRY_OVERHEAD = 800
# And per reply (one per server read): the bytes object and its slot, as tracemalloc counts
# them with the allocator's rounding (test_page_memo.py).
REPLY_OVERHEAD = 100


class Kept(NamedTuple):
    last: Hashable  # the remembered read the page's keys came from
    replies: Replies  # its multi-GET's, unparsed
    body: bytes
    size: int  # bytes counted against the bound


class PageMemo:
    def __init__(self, max_bytes: int) -> None:
        self._items: OrderedDict[PageKey, Kept] = OrderedDict()
        self._max_bytes = max_bytes
        self._bytes = 0

    def get(self, key: PageKey) -> Kept | None:
        """What was kept for ``key`` (marked as used): the caller checks it is still true."""
        kept = self._items.get(key)
        if kept is not None:
            self._items.move_to_end(key)
        return kept

    def put(self, key: PageKey, last: Hashable, replies: Replies, body: bytes) -> None:
        """The body is copied to its exact size (an encoder's buffer may be several KiB
        whatever the body's length). The replies' keys are the remembered read's (not
        counted)."""
        raw = replies.raw
        size = len(body) + sum(map(len, raw)) + REPLY_OVERHEAD * len(raw) + ENTRY_OVERHEAD
        if size > self._max_bytes:
            return
        old = self._items.pop(key, None)
        if old is not None:
            self._bytes -= old.size
        self._items[key] = Kept(last, replies.unparsed(), memoryview(body).tobytes(), size)
        self._bytes += size
        while self._bytes > self._max_bytes:
            _, dropped = self._items.popitem(last=False)
            self._bytes -= dropped.size
