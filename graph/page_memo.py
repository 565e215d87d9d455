"""Rendered timeline pages, remembered against the versions of the items they were read from.

A warm read of an unchanged timeline fetches the same items and walks them to the same page
every time; the walk and the rendering cost more CPU than the rest of an HTTP request
(README Performance). So the event loop's reader (graph/warm_reads.py) keeps, per page asked
(user, limit, cursor), what it rendered and the *validator* it was read under: the remembered
read that chose the keys, the epochs of the connections that read them, and per key its CAS
id (None: missing; a small item stands for itself, by its bytes). A later read of
the same page still fetches the items; when it finds the same validator it returns the
rendered bytes without walking.

**Why the same validator means the same page.** The keys asked are a function of the user and
the remembered read. A CAS id names one version of an item within one run of a memcached
server, and a connection lives within one run (graph/async_cache.py: ``Versioned``), so the
same key with the same CAS id on a connection of the same epoch is the same bytes. (Not so
behind a proxy that keeps client connections open across a server's restart, such as mcrouter
or twemproxy: the API must talk to memcached directly.) A small item is compared by its
bytes, which is stronger still. The page is a function of the bytes read (the walk has no
clock and no randomness; cap and settings are fixed for a process). Only reads answered by
their first batch are remembered here, so the validator covers everything they read.

Bounded by the bytes held (rendered bodies copied to their size, the validators' versions, a
fixed overhead per entry), least recently used first out. Everything held is plain tuples,
bytes and strings, which the garbage collector stops tracking: a full memo costs collections
nothing. Not thread-safe: the event loop's.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

PageKey = tuple[str, int, str | None]  # user, limit, cursor
# Bytes an entry holds besides its body and its validator's versions: the key, the remembered
# read it shares with the read memory (a head and ~5 keys), the tuples, the dict slot.
ENTRY_OVERHEAD = 800


class PageMemo:
    def __init__(self, max_bytes: int) -> None:
        self._items: OrderedDict[PageKey, tuple[Hashable, bytes, int]] = OrderedDict()
        self._max_bytes = max_bytes
        self._bytes = 0

    def get(self, key: PageKey, validator: Hashable) -> bytes | None:
        held = self._items.get(key)
        if held is None or held[0] != validator:
            return None
        self._items.move_to_end(key)
        return held[1]

    def put(self, key: PageKey, validator: Hashable, validator_bytes: int, body: bytes) -> None:
        """``validator_bytes``: what the validator holds of its own. The body is copied to
        its exact size (an encoder's buffer may be several KiB whatever the body's length)."""
        size = len(body) + validator_bytes + ENTRY_OVERHEAD
        if size > self._max_bytes:
            return
        old = self._items.pop(key, None)
        if old is not None:
            self._bytes -= old[2]
        self._items[key] = (validator, memoryview(body).tobytes(), size)
        self._bytes += size
        while self._bytes > self._max_bytes:
            _, (_, _, dropped) = self._items.popitem(last=False)
            self._bytes -= dropped
