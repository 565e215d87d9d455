"""What a request reads and writes through, and the threads that own them.

The drivers underneath are not thread-safe (a SQLite connection belongs to the thread that
opened it; a memcached pipe is one socket with replies read in order), and their calls block.
So each of a fixed number of threads opens its own ``Backends`` on its first task and is the
only one to use them; the event loop hands blocking work to whichever thread is free and
awaits the result. Invariant: a ``Backends`` is touched by exactly one thread, including when
it is closed at shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, Protocol, TypeVar

from timeline_fanout.api.consumer_lag import ConsumerLag
from timeline_fanout.graph.lists.counts import CountSource
from timeline_fanout.graph.lists.token_lists import ListLayout, TokenLists
from timeline_fanout.graph.model.edges import EdgeGraph
from timeline_fanout.graph.timelines.reader import TimelineReader
from timeline_fanout.producers import EventPublisher

P = ParamSpec("P")
T = TypeVar("T")


class ThreadGraph(EdgeGraph, Protocol):
    """A thread's edge store as its ``Backends`` use it: the graph, which the routes read
    (users, known users, health), and ``close`` for the thread that owns it."""

    def close(self) -> None: ...


@dataclass(slots=True)
class Backends:
    """One thread's connections. The follower/following lists and the cache are the timeline
    reader's own (one set of memcached connections per thread), and so is the cache of
    ``counts`` where the store does not keep them. ``lag`` is the exception: one per process,
    shared by every thread (it locks)."""

    store: ThreadGraph
    timelines: TimelineReader
    counts: CountSource
    open_publisher: Callable[[], EventPublisher]
    lag: ConsumerLag
    _publisher: EventPublisher | None = field(default=None, init=False)

    @property
    def lists(self) -> TokenLists[ListLayout]:
        return self.timelines.follow_lists

    @property
    def publisher(self) -> EventPublisher:
        """Opened on first use: most threads of a read-heavy API never publish."""
        if self._publisher is None:
            self._publisher = self.open_publisher()
        return self._publisher

    def close(self) -> None:
        if self._publisher is not None:
            self._publisher.flush(1.0)
        self.lists.cache.close()
        self.store.close()
        self.lag.close()


_Task = tuple[Callable[..., Any], tuple[Any, ...], asyncio.Future[Any], asyncio.AbstractEventLoop]


class BackendPool:
    """``size`` threads, each with its own ``Backends`` (opened lazily by ``open_backends``, so a
    store that is down at start-up fails requests, not the process, and is retried by the next
    task)."""

    def __init__(self, open_backends: Callable[[], Backends], size: int) -> None:
        self._open = open_backends
        self._tasks: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"fanout-api-{i}", daemon=True)
            for i in range(size)
        ]
        for thread in self._threads:
            thread.start()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(backends, *args)`` on a pool thread; its exception is raised here."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._tasks.put((fn, args, future, loop))
        return await future

    def close(self, timeout: float = 5.0) -> None:
        for _ in self._threads:
            self._tasks.put(None)
        for thread in self._threads:
            thread.join(timeout)

    def _work(self) -> None:
        backends: Backends | None = None
        try:
            while (task := self._tasks.get()) is not None:
                fn, args, future, loop = task
                try:
                    if backends is None:
                        backends = self._open()
                    result = fn(backends, *args)
                except Exception as exc:  # handed to the awaiting request
                    _hand_back(loop, future, None, exc)
                else:
                    _hand_back(loop, future, result, None)
        finally:
            if backends is not None:
                backends.close()


def _hand_back(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    result: Any,
    exc: BaseException | None,
) -> None:
    with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
        loop.call_soon_threadsafe(_settle, future, result, exc)


def _settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    """On the loop: the request may have gone (client disconnected) and its future with it."""
    if future.done():
        return
    if exc is None:
        future.set_result(result)
    else:
        future.set_exception(exc)
