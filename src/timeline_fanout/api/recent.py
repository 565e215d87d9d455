"""A value answered again while it is recent: what the public routes that ask backends or
render a lot (``/readyz``, ``/v1/stats``, ``/metrics``) keep for a second, so that a flood of
anonymous requests costs the backends and the event loop one computation a second per process,
not one per request. A second is shorter than any orchestrator's, scraper's or page's poll."""

from __future__ import annotations

import time
from typing import Generic, TypeVar

T = TypeVar("T")
MAX_AGE_S = 1.0


class Recent(Generic[T]):
    """Not locked: callers on one thread (the event loop), or under their own lock."""

    def __init__(self, max_age_s: float = MAX_AGE_S) -> None:
        self.max_age_s = max_age_s
        self._kept: tuple[float, T] | None = None

    def get(self) -> T | None:
        if self._kept is None or time.monotonic() - self._kept[0] >= self.max_age_s:
            return None
        return self._kept[1]

    def put(self, value: T) -> T:
        self._kept = (time.monotonic(), value)
        return value
