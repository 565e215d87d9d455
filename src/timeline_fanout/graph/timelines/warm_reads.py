"""Timeline reads on an event loop: a page whenever multi-GETs are all it needs.

A read on a request thread pays for the hop twice (handing the request over, and the GIL it waits
for after each socket call while the loop holds it); under load the hops were most of a read's
latency and all of its tail (docs/decisions/event-loop-reads.md). Here the multi-GETs are sent from
the event loop (memcache/async_cluster.py) and the page is walked on the loop.

**The same code as every other read, never a second version of it.** The checks and the walk are
``TimelineFetch.settle`` and ``TimelineReader.page``, run by a reader of the loop's own whose
memcached client answers multi-GETs from a record (``ReplayCache``) and whose edge store cannot be
queried. A run that asks for a multi-GET beyond the record stops (``NotWarm`` with the keys); the
keys are read on the loop, and the read runs again from the start with the longer record. The read
is deterministic given what its multi-GETs return (but for post texts the process learnt since the
run before, which only leave keys out of a multi-GET), so each run repeats the one before up to
where it stopped, and the multi-GETs are sent in the order the blocking read sends them, each after
the one before completed: a remembered user's read is one batch, a first read is two (the following
list's shards after its head), a newly followed celebrity adds one. Anything else (a rebuild, a
regeneration, a compaction, dropping a corrupt item, a wait for a list being built, a store query)
raises ``NotWarm`` without keys: the read returns None, having changed nothing but the shared
``ReadMemory``, and the caller does the whole read the blocking way (which heals what needs
healing). A corrupt item (``CorruptList``, ``CorruptMember``) is None too: the blocking read
drops and regenerates it.

The remembered read is taken once, before the batch is sent, and the same value builds the
batch and judges it: graph/timelines/fetch.py's argument needs the batch sent after the
remembered head was read, and a request thread may remember a newer head while this one awaits.

Only the event loop's thread uses a ``WarmReads``; the runs of one read happen between awaits,
so the loop's reader and its record are never used by two reads at once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import NoReturn, TypeVar

from timeline_fanout.graph.lists.tokens import CorruptList, CorruptMember
from timeline_fanout.graph.model.edges import EdgeChange, PostKey, PostRecord, PostRef
from timeline_fanout.graph.model.keys import ListRef
from timeline_fanout.graph.timelines.author_pages import AuthorPage
from timeline_fanout.graph.timelines.fetch import Remembered
from timeline_fanout.graph.timelines.page_memo import PageKey, PageMemo
from timeline_fanout.graph.timelines.reader import BadCursor, TimelinePage, TimelineReader
from timeline_fanout.memcache import CacheUnavailable, Item
from timeline_fanout.memcache.async_cluster import AsyncMemcache

# Multi-GETs a warm read may make after its batch: a list read for the first time (its shards,
# after its head), then celebrities it follows that were not remembered, then the bodies of
# posts its page shows that were not remembered (graph/timelines/post_bodies.py).
ROUND_TRIPS = 4
T = TypeVar("T")


class NotWarm(Exception):
    """A warm read needed I/O it cannot do on the loop: the caller reads the blocking way.
    ``asked``: the keys of a multi-GET it could do there (None for anything else)."""

    def __init__(self, what: str, asked: list[bytes] | None = None) -> None:
        super().__init__(what)
        self.asked = asked


class ReplayCache:
    """The loop's reader's cache (a ``Cache``): multi-GETs are answered from a record of
    earlier ones, in order, and the first one beyond the record raises ``NotWarm`` with its keys
    (for the caller to read them on the loop and run the read again with a longer record);
    every other exchange with a server (a write, a delete, a counter), and a wait for a list
    being built, raise ``NotWarm``. The read is deterministic given what its multi-GETs return,
    so a run with a longer record repeats the previous run up to where it stopped."""

    def __init__(self) -> None:
        self._record: list[tuple[list[bytes], dict[bytes, Item]]] = []
        self._next = 0

    def replay(self, record: list[tuple[list[bytes], dict[bytes, Item]]]) -> None:
        self._record = record
        self._next = 0

    def available(self, keys: Sequence[bytes]) -> list[bool]:
        """Every key: the record holds only multi-GETs of servers that were usable (the loop's
        client refuses the others)."""
        return [True] * len(keys)

    def checkpoint(self) -> NoReturn:
        raise NotWarm("memcached")

    def missed(self, keys: Sequence[bytes], since: int) -> NoReturn:
        raise NotWarm("memcached")

    def gets_many(self, keys: Iterable[bytes]) -> dict[bytes, Item]:
        """The next recorded multi-GET's items, if it asked at least ``keys``: a run may ask
        a part of what the run before asked there, the posts whose texts the process learnt
        meanwhile left out (graph/timelines/post_bodies.py)."""
        asked = list(keys)
        if self._next < len(self._record):
            recorded, found = self._record[self._next]
            if recorded == asked:
                self._next += 1
                return dict(found)
            if set(asked).issubset(recorded):
                self._next += 1
                return {key: found[key] for key in asked if key in found}
        raise NotWarm("memcached", asked)

    def get_many(self, keys: Iterable[bytes]) -> dict[bytes, bytes]:
        return {key: item.value for key, item in self.gets_many(keys).items()}

    def wait(self, seconds: float) -> NoReturn:
        raise NotWarm("a list being built")

    def add_many(self, values: Mapping[bytes, bytes], expire: int = 0) -> NoReturn:
        raise NotWarm("memcached")

    def append_many(self, values: Mapping[bytes, bytes]) -> NoReturn:
        raise NotWarm("memcached")

    def append_to_each(self, groups: Sequence[tuple[bytes, Sequence[bytes]]]) -> NoReturn:
        raise NotWarm("memcached")

    def set_many(self, values: Mapping[bytes, bytes], expire: int = 0) -> NoReturn:
        raise NotWarm("memcached")

    def cas_many(
        self, values: Mapping[bytes, tuple[bytes, bytes]], expire: int | Mapping[bytes, int] = 0
    ) -> NoReturn:
        raise NotWarm("memcached")

    def cas(self, key: bytes, value: bytes, cas_id: bytes, expire: int = 0) -> NoReturn:
        raise NotWarm("memcached")

    def delete_if_unchanged(self, items: Mapping[bytes, bytes]) -> NoReturn:
        raise NotWarm("memcached")

    def incr_many(self, deltas: Mapping[bytes, int]) -> NoReturn:
        raise NotWarm("memcached")

    def decr_many(self, deltas: Mapping[bytes, int]) -> NoReturn:
        raise NotWarm("memcached")

    def exists_many(self, keys: Iterable[bytes]) -> NoReturn:
        raise NotWarm("memcached")

    def delete_many(self, keys: Iterable[bytes]) -> NoReturn:
        raise NotWarm("memcached")

    def versions(self) -> NoReturn:
        raise NotWarm("memcached")

    def close(self) -> None:
        """Nothing to close: a replay holds no connection."""


class OfflineStore:
    """The loop's reader's edge store (an ``EdgeStore``): every query raises ``NotWarm``, so a
    read that needs the store is handed to a request thread."""

    counts_kept = True  # its ``counts`` raises like every query: nothing to cache in front

    def apply(self, changes: Sequence[EdgeChange]) -> NoReturn:
        raise NotWarm("edge store: apply")

    def positions(self, edges: Sequence[tuple[str, str]]) -> NoReturn:
        raise NotWarm("edge store: positions")

    def remove_user(self, user: str, pos: int) -> NoReturn:
        raise NotWarm("edge store: remove_user")

    def snapshot(self, ref: ListRef) -> NoReturn:
        raise NotWarm("edge store: snapshot")

    def followers(
        self, user: str, *, group: str | None = None, after: str | None = None, limit: int = 1000
    ) -> NoReturn:
        raise NotWarm("edge store: followers")

    def following(
        self, user: str, *, group: str | None = None, after: str | None = None, limit: int = 1000
    ) -> NoReturn:
        raise NotWarm("edge store: following")

    def counts(self, user: str) -> NoReturn:
        raise NotWarm("edge store: counts")

    def is_following(self, follower: str, followee: str) -> NoReturn:
        raise NotWarm("edge store: is_following")

    def users(self) -> NoReturn:
        raise NotWarm("edge store: users")

    def known_users(self, users: Collection[str]) -> NoReturn:
        raise NotWarm("edge store: known_users")

    def store_posts(self, posts: Sequence[PostRecord]) -> NoReturn:
        raise NotWarm("edge store: store_posts")

    def delete_posts(self, posts: Sequence[PostRef]) -> NoReturn:
        raise NotWarm("edge store: delete_posts")

    def post_bodies(self, posts: Collection[PostRef]) -> NoReturn:
        raise NotWarm("edge store: post_bodies")

    def recent_posts(self, authors: Collection[str], limit: int) -> NoReturn:
        raise NotWarm("edge store: recent_posts")

    def author_posts(self, author: str, limit: int, before: PostKey | None = None) -> NoReturn:
        raise NotWarm("edge store: author_posts")

    def add_celebrities(self, users: Iterable[str]) -> NoReturn:
        raise NotWarm("edge store: add_celebrities")

    def celebrities(self) -> NoReturn:
        raise NotWarm("edge store: celebrities")

    def all_members(self, ref: ListRef) -> NoReturn:
        raise NotWarm("edge store: all_members")

    def recounted(self, user: str) -> NoReturn:
        raise NotWarm("edge store: recounted")

    def close(self) -> None:
        """Nothing to close: no connection is ever opened."""


class WarmReads:
    """``reader``: built on ``replay`` and an ``OfflineStore``, sharing its ``ReadMemory`` with
    the process's blocking readers; ``cache``: the same memcached, sharing the blocking
    clients' ``ServerTrust``; ``memo``: rendered pages (graph/timelines/page_memo.py), or None.

    A read that meets a server that is down or has no lease (``CacheUnavailable``) is not warm:
    the blocking read, which goes around such servers, answers it."""

    def __init__(
        self,
        reader: TimelineReader,
        replay: ReplayCache,
        cache: AsyncMemcache,
        memo: PageMemo | None = None,
    ) -> None:
        self._reader = reader
        self._replay = replay
        self._cache = cache
        self._memo = memo

    async def page(self, user: str, limit: int, cursor: str | None) -> TimelinePage | None:
        """The page ``TimelineReader.page`` would return, or None when the read is not warm.
        Raises ``BadCursor`` and ``CacheUnavailable`` as the blocking read does."""
        last = self._reader.fetcher.remembered(user)
        try:
            batch = await self._cache.gets_many(self._reader.fetcher.batch_keys(user, last))
        except CacheUnavailable:
            return None
        page, _ = await self._walk(user, last, batch, limit, cursor)
        return page

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
        fetcher = self._reader.fetcher
        last = fetcher.remembered(user)
        asked: PageKey = (user, limit, cursor)
        memo = self._memo
        kept = None if memo is None else memo.get(asked)
        hoped = kept.replies if kept is not None and kept.last == last else None
        try:
            replies = await self._cache.gets_replies(fetcher.batch_keys(user, last), hoped)
        except CacheUnavailable:
            return None
        if replies.found is None:  # the kept page's replies (so there is one): its page
            return None if kept is None else kept.body
        page, trips = await self._walk(user, last, replies.found, limit, cursor)
        body = None if page is None else render(page)
        bodies = self._reader.bodies
        if memo is not None and body is not None and all(map(bodies.holds, trips)):
            memo.put(asked, last, replies, body)
        return body

    async def _walk(
        self,
        user: str,
        last: Remembered | None,
        batch: dict[bytes, Item],
        limit: int,
        cursor: str | None,
    ) -> tuple[TimelinePage | None, list[bytes]]:
        """The page from ``batch`` (read with ``batch_keys(user, last)``) and the keys of the
        multi-GETs it needed after it (module docstring)."""
        reader = self._reader
        return await self._replayed(
            lambda: reader.page(user, limit, cursor, reader.fetcher.settle(user, last, dict(batch)))
        )

    async def author_page(self, user: str, limit: int, cursor: str | None) -> AuthorPage | None:
        """The page ``AuthorPages.page`` would return (graph/timelines/author_pages.py), or None
        when it is not warm. Raises ``BadCursor`` and ``CacheUnavailable`` as that does."""
        pages = self._reader.author_pages
        page, _ = await self._replayed(lambda: pages.page(user, limit, cursor))
        return page

    async def _replayed(self, read: Callable[[], T]) -> tuple[T | None, list[bytes]]:
        """``read()`` run by runs on the replay (module docstring): each run that stops at a
        multi-GET beyond the record has it read on the loop and runs again; None when it needs
        anything else, a corrupt member included. With the keys it read after the first."""
        record: list[tuple[list[bytes], dict[bytes, Item]]] = []
        while len(record) <= ROUND_TRIPS:
            self._replay.replay(record)
            try:
                return read(), [key for keys, _ in record for key in keys]
            except NotWarm as exc:
                if exc.asked is None or len(record) == ROUND_TRIPS:
                    break
                # Sent after every earlier read completed, as the blocking read sends it.
                try:
                    record.append((exc.asked, await self._cache.gets_many(exc.asked)))
                except CacheUnavailable:
                    break
            except BadCursor:
                raise
            except (CorruptList, CorruptMember):  # the blocking read heals it
                break
            finally:
                self._replay.replay([])
        return None, [key for keys, _ in record for key in keys]

    def close(self) -> None:
        self._cache.close()
