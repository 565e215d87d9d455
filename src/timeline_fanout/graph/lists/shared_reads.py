"""Store reads that a process's threads share, so that a hot list on an unavailable cache
server does not send every one of its readers to the store.

While a memcached server is down, the lists and timelines it holds are answered from the edge
store and nothing is written back (memcache/trust.py): without this, a list read a thousand
times a second is a thousand store queries a second, for as long as the outage lasts. Facebook's
memcache answers the same herd with leases that let one client in ten seconds refill a key and
serve the others a stale value; here nothing stale may be served (the read must stay exact), so
the readers of one list share queries instead of skipping them:

- **One query per list at a time.** A reader that finds no query running for its list starts
  one. A reader that finds one running waits for it to end and then takes the *next* query,
  which every reader that arrived meanwhile shares and which starts only when the running one
  ends. So at most one query per list is running and at most one is waiting, whatever the
  number of readers: store queries per list are bounded by the query's own duration, not by
  the read rate.
- **Exact.** Every reader's answer comes from a query that started after the reader asked (a
  reader never takes the running query's answer: that query may have started before a write
  the reader must see). What a reader gets is what its own query would have got, at most one
  query's duration later.

A query's error is raised to every reader that shares it (the next reader starts afresh). Safe
to share between threads; each reader passes its own ``read`` (its own store connection), and the
one that runs a query runs it on its own thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(eq=False, slots=True)
class _Query(Generic[V]):
    """One store query and the readers waiting for its answer."""

    done: threading.Event = field(default_factory=threading.Event)
    value: V | None = None
    error: BaseException | None = None

    def answer(self) -> V:
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]  # set before ``done``


@dataclass(slots=True)
class SharedReadStats:
    reads: int = 0  # reads answered through here
    queries: int = 0  # store queries run for them (reads - queries: reads that shared one)


class SharedReads(Generic[K, V]):
    """``read(key, query)``: ``query()``'s value, from a query shared with concurrent readers of
    ``key`` (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[K, _Query[V]] = {}
        self._next: dict[K, _Query[V]] = {}
        self.stats = SharedReadStats()

    def read(self, key: K, query: Callable[[], V]) -> V:
        shared: _Query[V] | None = None
        with self._lock:
            self.stats.reads += 1
            ahead = self._running.get(key)
            if ahead is None:
                mine = self._running[key] = _Query[V]()
            elif key in self._next:
                shared = self._next[key]
            else:
                mine = self._next[key] = _Query[V]()
        if shared is not None:
            return shared.answer()
        if ahead is not None:
            ahead.done.wait()  # its runner made ``mine`` the running query before this
        return self._run(key, mine, query)

    def _run(self, key: K, mine: _Query[V], query: Callable[[], V]) -> V:
        """Runs ``mine``, the running query for ``key``; then, before any of its readers wake,
        makes the query waiting behind it (if any) the running one."""
        try:
            mine.value = query()
        except BaseException as exc:
            mine.error = exc
        finally:
            with self._lock:
                self.stats.queries += 1
                queued = self._next.pop(key, None)
                if queued is None:
                    del self._running[key]
                else:
                    self._running[key] = queued
            mine.done.set()
        return mine.answer()
