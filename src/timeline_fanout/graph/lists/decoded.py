"""The members last decoded from a list's items, kept while those items' bytes are unchanged.

A home timeline read decodes the reader's following list (a token per member, Python work per
token), and a list's bytes change only when someone follows or unfollows: a reader following
100k users paid ~100 ms of decoding on every read its page memo missed (a fresh cursor each
time). Here a list is decoded once per change of its bytes.

The key is the bytes themselves, compared in full (a C ``memcmp``, ~1 ms for 100k members
against ~100 ms to decode them), not CAS ids: a memcached restart starts CAS ids again, so an
id can come back naming other bytes. Only lists of at least ``min_bytes`` of items are kept (a
small one decodes faster than it is looked up), least recently used first out past ``max_bytes``
in all, each list counted as its items' bytes plus what its members take in Python (their
characters and ``MEMBER_OVERHEAD`` each: a str's header and its slot in the set; measured with
tracemalloc, 10-character ids take ~3x their tokens' bytes). Shared by a process's request
threads and its event loop, under one lock held only for dictionary work.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from timeline_fanout.graph.lists.tokens import MemberSet

MEMBER_OVERHEAD = 80


class DecodedLists:
    def __init__(self, max_bytes: int = 64 << 20, min_bytes: int = 16 << 10) -> None:
        self._max_bytes = max_bytes
        self._min_bytes = min_bytes
        self._held = 0
        # key -> (the items' values, the members, the bytes this entry is counted as)
        self._lists: OrderedDict[bytes, tuple[tuple[bytes, ...], MemberSet, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: bytes, values: Sequence[bytes]) -> MemberSet | None:
        """The members decoded from exactly ``values`` (the head's shards, in order)."""
        with self._lock:
            kept = self._lists.get(key)
            if kept is None:
                return None
            self._lists.move_to_end(key)
        return kept[1] if kept[0] == tuple(values) else None

    def put(self, key: bytes, values: Sequence[bytes], members: MemberSet) -> None:
        items = sum(len(v) for v in values)
        size = 2 * items + MEMBER_OVERHEAD * len(members)  # tokens' bytes ~ members' characters
        if items < self._min_bytes or size > self._max_bytes:
            return
        with self._lock:
            old = self._lists.pop(key, None)
            if old is not None:
                self._held -= old[2]
            self._lists[key] = (tuple(values), members, size)
            self._held += size
            while self._held > self._max_bytes:
                self._held -= self._lists.popitem(last=False)[1][2]
