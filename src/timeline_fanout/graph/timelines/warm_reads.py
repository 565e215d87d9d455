"""Timeline reads on an event loop: a page whenever multi-GETs are all it needs.

A read on a request thread pays for the hop twice (handing the request over, and the GIL it waits
for after each socket call while the loop holds it); under load the hops were most of a read's
latency and all of its tail (docs/decisions/event-loop-reads.md). Here the multi-GETs are sent from
the event loop (memcache/async_cluster.py) and the page is walked on the loop.

**The same code as every other read, never a second version of it.** A read is a plan
(graph/timelines/plan.py): ``TimelineReader.paging`` and ``AuthorPages.paging``, the very plans a
request thread runs. This executor answers each ``MultiGet`` from the loop, each after the one
before completed, as the blocking executor sends them: a remembered user's read is one batch, a
first read is two (the following list's shards after its head), a newly followed celebrity adds
one, post texts not known add one. It stops at the first ``Blocking`` step (a rebuild, a
regeneration, a compaction, dropping a corrupt item, a wait for a list being built, a store query)
and at a corrupt item (``CorruptList``, ``CorruptMember``): the read returns None, having changed
nothing but the shared ``ReadMemory`` and ``KnownTexts``, and the caller does the whole read on a
request thread (which heals what needs healing).

The plans come from a reader of the loop's own (``plans``): a plan does no I/O between its yields,
so the loop never touches that reader's connections (it is given a request thread's, to hold
nothing of its own), and its statistics are its own.

The remembered read is taken once, before the batch is sent, and the same value builds the
batch and judges it: graph/timelines/fetch.py's argument needs the batch sent after the
remembered head was read, and a request thread may remember a newer head while this one awaits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from timeline_fanout.graph.lists.tokens import CorruptList, CorruptMember
from timeline_fanout.graph.timelines.author_pages import AuthorPage
from timeline_fanout.graph.timelines.fetch import Batch
from timeline_fanout.graph.timelines.page_memo import PageKey, PageMemo
from timeline_fanout.graph.timelines.plan import MultiGet, Plan
from timeline_fanout.graph.timelines.reader import TimelinePage, TimelineReader
from timeline_fanout.memcache import CacheUnavailable, Item
from timeline_fanout.memcache.async_cluster import AsyncMemcache

# Multi-GETs a warm read may make after its batch: a list read for the first time (its shards,
# after its head), then celebrities it follows that were not remembered, then the bodies of
# posts its page shows that were not remembered (graph/timelines/post_bodies.py).
ROUND_TRIPS = 4
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Ran(Generic[T]):
    """A plan run on the loop to its end: its result and the keys of the multi-GETs it sent."""

    value: T
    read: list[bytes]


class WarmReads:
    """``plans``: the reader whose plans the loop runs (module docstring), or None until one is
    lent (``plan_with``): until then no read is warm. ``cache``: the same memcached, sharing the
    blocking clients' ``ServerTrust``; ``memo``: rendered pages (graph/timelines/page_memo.py),
    or None. Only the event loop's thread uses a ``WarmReads``.

    A read that meets a server that is down or has no lease (``CacheUnavailable``) is not warm:
    the blocking read, which goes around such servers, answers it."""

    def __init__(
        self,
        cache: AsyncMemcache,
        memo: PageMemo | None = None,
        plans: TimelineReader | None = None,
    ) -> None:
        self._cache = cache
        self._memo = memo
        self._plans = plans

    def plan_with(self, reader: TimelineReader) -> None:
        """Lends the reader whose plans the loop runs (a request thread lends one when it
        opens its connections: the store opens there, never on the loop)."""
        self._plans = reader

    async def page(self, user: str, limit: int, cursor: str | None) -> TimelinePage | None:
        """The page ``TimelineReader.page`` would return, or None when the read is not warm.
        Raises ``BadCursor`` as the blocking read does."""
        plans = self._plans
        if plans is None:
            return None
        last = plans.fetcher.remembered(user)
        try:
            batch = await self._cache.gets_many(plans.fetcher.batch_keys(user, last))
        except CacheUnavailable:
            return None
        ran = await self._run(plans.paging(user, limit, cursor, Batch(last, batch)))
        return None if ran is None else ran.value

    async def rendered(
        self,
        user: str,
        limit: int,
        cursor: str | None,
        render: Callable[[TimelinePage], bytes | None],
    ) -> bytes | None:
        """``render(page)`` of ``page``'s page (None when ``page`` is None or ``render`` says
        so), remembered in the memo when the read took one batch, and taken from there when a
        later read of the same page gets the same replies (graph/timelines/page_memo.py)."""
        plans = self._plans
        if plans is None:
            return None
        last = plans.fetcher.remembered(user)
        asked: PageKey = (user, limit, cursor)
        memo = self._memo
        kept = None if memo is None else memo.get(asked)
        hoped = kept.replies if kept is not None and kept.last == last else None
        try:
            replies = await self._cache.gets_replies(plans.fetcher.batch_keys(user, last), hoped)
        except CacheUnavailable:
            return None
        if replies.found is None:  # the kept page's replies (so there is one): its page
            return None if kept is None else kept.body
        ran = await self._run(plans.paging(user, limit, cursor, Batch(last, replies.found)))
        if ran is None:
            return None
        body = render(ran.value)
        if memo is not None and body is not None and all(map(plans.bodies.holds, ran.read)):
            memo.put(asked, last, replies, body)
        return body

    async def author_page(self, user: str, limit: int, cursor: str | None) -> AuthorPage | None:
        """The page ``AuthorPages.page`` would return (graph/timelines/author_pages.py), or None
        when it is not warm. Raises ``BadCursor`` as that does."""
        plans = self._plans
        if plans is None:
            return None
        ran = await self._run(plans.author_pages.paging(user, limit, cursor))
        return None if ran is None else ran.value

    async def _run(self, plan: Plan[T]) -> Ran[T] | None:
        """``plan`` run on the loop (module docstring): its multi-GETs sent from here, at most
        ``ROUND_TRIPS``; None at a blocking step, a corrupt item or a server unavailable."""
        rounds: list[Sequence[bytes]] = []
        answer: dict[bytes, Item] | None = None
        try:
            while True:
                need = plan.send(answer)
                if not isinstance(need, MultiGet) or len(rounds) == ROUND_TRIPS:
                    return None
                try:
                    answer = await self._cache.gets_many(need.keys)
                except CacheUnavailable:
                    return None
                rounds.append(need.keys)
        except StopIteration as done:
            return Ran(done.value, [key for keys in rounds for key in keys])
        except (CorruptList, CorruptMember):  # the blocking read heals it
            return None
        finally:
            plan.close()

    def close(self) -> None:
        self._cache.close()
