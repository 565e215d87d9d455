"""A read as a plan: what it needs from the outside, told apart from how it is fetched.

A page read is written once, as a generator that *yields* what it needs and is *sent* the
answer, and is run by either of two executors:

- a ``MultiGet``: the items of these keys, as ``Cache.gets_many`` returns them (a key absent
  from the answer is a miss);
- a ``Blocking`` step: anything else the read may have to do (ask the edge store, rebuild or
  regenerate a list, fill a post's body, drop a corrupt item, wait for a list being built),
  as a call the blocking executor makes and whose result it sends back.

``run_blocking`` (a request thread, the CLI) answers both with its own connections.
The event loop's executor (graph/timelines/warm_reads.py) answers multi-GETs from the loop and
stops at the first ``Blocking`` step: that read is handed to a request thread whole.

**Invariant: between two yields a plan does no I/O.** Everything a plan reads from a server
comes through a yield, and everything it writes or asks the store is inside a ``Blocking``
step, so the loop can run a plan without ever touching the connections of the reader that
made it. The in-process memories a plan updates (``ReadMemory``, ``KnownTexts``) lock.

An exception raised while answering a step is thrown into the plan at its yield, so a plan
handles a failure where a plain call would have (a corrupt list found by a rebuild's read is
caught by the read that asked for it).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from timeline_fanout.memcache import Item
from timeline_fanout.memcache.interface import Cache

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class MultiGet:
    """The items of ``keys`` (``gets``: value and CAS id), in one round trip per server."""

    keys: Sequence[bytes]


@dataclass(frozen=True, slots=True)
class Blocking(Generic[T]):
    """A step only a blocking executor takes: ``run()``'s result is sent back. ``what`` names
    it (for logs and tests: why a read was not answered on the loop)."""

    what: str
    run: Callable[[], T]


Need = MultiGet | Blocking[Any]
Plan = Generator[Need, Any, T]


def multi_get(keys: Sequence[bytes]) -> Plan[dict[bytes, Item]]:
    """``yield from multi_get(keys)``: the items found (no round trip for no keys)."""
    if not keys:
        return {}
    found = yield MultiGet(keys)
    return cast(dict[bytes, Item], found)


def blocking(what: str, run: Callable[[], T]) -> Plan[T]:
    """``yield from blocking(what, run)``: ``run()``, taken by a blocking executor only."""
    result = yield Blocking(what, run)
    return cast(T, result)


def run_blocking(plan: Plan[T], cache: Cache) -> T:
    """Runs ``plan`` to its end on this thread.

    Args:
        plan: A plan, started or not (a generator that has not yielded yet).
        cache: The client its multi-GETs are sent with (its blocking steps bring their own
            connections).

    Returns:
        The plan's result.

    Raises:
        Exception: Whatever the plan raises, including a failure answering one of its steps
            that it does not handle itself.
    """
    answer: Any = None
    failure: BaseException | None = None
    while True:
        try:
            need = plan.throw(failure) if failure is not None else plan.send(answer)
        except StopIteration as done:
            return cast(T, done.value)
        answer, failure = None, None
        try:
            answer = cache.gets_many(need.keys) if isinstance(need, MultiGet) else need.run()
        except Exception as exc:  # thrown into the plan, which handles it or raises it here
            failure = exc
