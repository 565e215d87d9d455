"""The members last decoded from a list's items, kept while those items' bytes are unchanged.

A home timeline read decodes the reader's following list (a token per member, Python work per
token), and a list's bytes change only when someone follows or unfollows: a reader following
100k users paid ~100 ms of decoding on every read its page memo missed (a fresh cursor each
time). Here a list is decoded once per change of its bytes.

The key is the bytes themselves, compared in full (a C ``memcmp``, ~1 ms for 100k members
against ~100 ms to decode them), not CAS ids: a memcached restart starts CAS ids again, so an
id can come back naming other bytes. Only lists of at least ``min_bytes`` are kept (a small one
decodes faster than it is looked up), least recently used first out past ``max_bytes`` in all
(the items' bytes counted twice, for the members). Shared by a process's request threads and
its event loop, under one lock held only for dictionary work.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence


class DecodedLists:
    def __init__(self, max_bytes: int = 64 << 20, min_bytes: int = 16 << 10) -> None:
        self._max_bytes = max_bytes
        self._min_bytes = min_bytes
        self._held = 0
        self._lists: OrderedDict[bytes, tuple[tuple[bytes, ...], frozenset[str]]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: bytes, values: Sequence[bytes]) -> frozenset[str] | None:
        """The members decoded from exactly ``values`` (the head's shards, in order)."""
        with self._lock:
            kept = self._lists.get(key)
            if kept is None:
                return None
            self._lists.move_to_end(key)
        return kept[1] if kept[0] == tuple(values) else None

    def put(self, key: bytes, values: Sequence[bytes], members: frozenset[str]) -> None:
        size = 2 * sum(len(v) for v in values)
        if size < self._min_bytes or size > self._max_bytes:
            return
        with self._lock:
            old = self._lists.pop(key, None)
            if old is not None:
                self._held -= 2 * sum(len(v) for v in old[0])
            self._lists[key] = (tuple(values), members)
            self._held += size
            while self._held > self._max_bytes:
                _, (dropped, _members) = self._lists.popitem(last=False)
                self._held -= 2 * sum(len(v) for v in dropped)
