"""Where the graph layer's fresh values come from: the clocks and random hex.

A rebuild's generation id carries an absolute deadline read from the wall clock and random hex
(graph/lists/fencing.py); a rollover's shard name (graph/lists/sharded.py) and a deletion mark's
value (graph/timelines/post_bodies.py) are random hex. The fences rely on each being a value its
key never held before; the product draws them from ``secrets``, so that holds with overwhelming
odds. Deadlines that stay inside the process are read from the monotonic clock: until when a
text known under a deletion mark is used (graph/timelines/post_bodies.py), and how long a
celebrity item may live (graph/timelines/celebrity_posts.py). The lists, post bodies and
celebrity posts that need them are given one ``Fresh`` when built, so that a caller that needs
them reproducible (the interleaving explorer: a fixed clock, a counter; a test moving the
monotonic clock past an expiry) passes its own instead of replacing anything in the product's
modules.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Fresh:
    """``clock``: unix seconds (only absolute deadlines are read from it); ``token_hex(n)``:
    ``2 * n`` lowercase hex digits, never the same twice for one ``n``; ``monotonic``: seconds
    that never go back (only deadlines inside the process are read from it)."""

    clock: Callable[[], float] = time.time
    token_hex: Callable[[int], str] = secrets.token_hex
    monotonic: Callable[[], float] = time.monotonic

    def hex(self, nbytes: int) -> bytes:
        """``token_hex`` as the ASCII bytes keys and values are made of."""
        return self.token_hex(nbytes).encode("ascii")


SYSTEM = Fresh()
