"""Store reads shared by concurrent readers of one list (graph/lists/shared_reads.py): a burst
of readers costs at most two queries, and no reader takes an answer from a query that started
before it asked."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from timeline_fanout.graph.lists.shared_reads import SharedReads

READERS = 20


class Store:
    """A value that writes change, read by queries that the test holds running at will."""

    def __init__(self) -> None:
        self.version = 0
        self.started: list[int] = []  # the version each query saw when it started
        self.hold = threading.Event()
        self.fail_next = False

    def query(self) -> int:
        seen = self.version
        self.started.append(seen)
        if len(self.started) == 1:
            assert self.hold.wait(10)
        if self.fail_next:
            self.fail_next = False
            raise ConnectionError("store down")
        return seen


def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Polls ``condition()`` (a state of the object under test, not a guess at timing)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.001)


def run(target: Callable[[], object], count: int) -> list[threading.Thread]:
    threads = [threading.Thread(target=target) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads


def test_readers_arriving_during_a_query_share_one_that_starts_after_they_asked() -> None:
    shared: SharedReads[str, int] = SharedReads()
    store = Store()
    answers: list[int] = []
    first = run(lambda: answers.append(shared.read("k", store.query)), 1)
    until(lambda: len(store.started) == 1)
    store.version = 1  # written after the running query read the store: it must not be missed
    later: list[int] = []
    threads = run(lambda: later.append(shared.read("k", store.query)), READERS)
    until(lambda: shared.stats.reads == READERS + 1)
    store.hold.set()
    for thread in first + threads:
        thread.join(10)
    assert answers == [0]
    assert later == [1] * READERS
    assert store.started == [0, 1]
    assert shared.stats.queries == 2


def test_a_reader_alone_runs_its_own_query_and_other_keys_never_wait() -> None:
    shared: SharedReads[str, int] = SharedReads()
    store = Store()
    store.hold.set()
    assert shared.read("a", store.query) == 0
    store.version = 2
    assert shared.read("a", store.query) == 2
    assert shared.read("b", lambda: 7) == 7
    assert (shared.stats.reads, shared.stats.queries) == (3, 3)


def test_a_failed_query_fails_its_readers_and_the_next_reader_starts_afresh() -> None:
    shared: SharedReads[str, int] = SharedReads()
    store = Store()
    errors: list[BaseException] = []

    def read() -> None:
        try:
            shared.read("k", store.query)
        except ConnectionError as exc:
            errors.append(exc)

    first = run(read, 1)
    until(lambda: len(store.started) == 1)
    store.fail_next = True  # the running query fails when it is let go
    store.hold.set()
    first[0].join(10)
    assert len(errors) == 1
    store.version = 3
    assert shared.read("k", store.query) == 3
    with pytest.raises(ZeroDivisionError):
        shared.read("k", lambda: 1 // 0)
    assert shared.read("k", lambda: 4) == 4
