"""Pages of one author's posts, newest first, for ``GET /v1/users/{user}/posts`` and ``fanout
posts``: read from a cached item of the author's newest posts, with texts from the post bodies
(graph/timelines/post_bodies.py), and from the edge store's index on (author, time) past the
item's end.

``{ns}|ap|{author}`` holds ``all`` or ``top`` and then the author's newest ``ITEM_POSTS`` live
posts as timeline members (``{ts}!{author}!{post_id}``, newest first; ``all``: that is every
post), or ``~`` while a reader fills it. **How it stays right.** The fan-out consumer deletes an
author's item in every batch that stores a post of theirs or deletes one, after the store write
(consumers/fanout_apply.py). A reader fills a missing item through the fence the lists use:
ADD ``~``, ``gets``, read the store, CAS. A CAS holds a ``gets`` taken before its store read,
so a store write whose invalidation came after that ``gets`` makes the CAS fail (the item was
deleted), and one whose invalidation came before it was committed before the store read, which
sees it. So once a batch is through, no item misses its posts or holds its deletions; a
deletion is hidden before that by the post's body, which every page reads.

The cursor is the timelines' (``time!author!post_id``, graph/timelines/entries.py), naming the
last post shown. Its time and post id are a place in any author's posts (the author part is
not needed to find it), so any well-formed cursor is a place, as any id is in a member list.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from timeline_fanout.graph.lists.fencing import filling
from timeline_fanout.graph.lists.tokens import CorruptMember
from timeline_fanout.graph.model.edges import PostKey, PostRecord, PostStore
from timeline_fanout.graph.model.keys import KeySpace
from timeline_fanout.graph.timelines.entries import TimelineEntry
from timeline_fanout.graph.timelines.plan import Plan, blocking, multi_get, run_blocking
from timeline_fanout.graph.timelines.post_bodies import PostBodies
from timeline_fanout.memcache import Item
from timeline_fanout.memcache.interface import Cache

ITEM_POSTS = 200  # an author's newest posts held in the item: the first pages of every reader
ALL = b"all"
TOP = b"top"


@dataclass(frozen=True, slots=True)
class AuthorPage:
    user: str
    posts: list[PostRecord]
    next: str | None  # the cursor of the last post shown; None at the end

    def body(self) -> dict[str, object]:
        """The page as the API and ``fanout posts --json`` give it."""
        posts = [
            {"post_id": p.post_id, "author": p.author, "ts": p.ts, "text": p.text}
            for p in self.posts
        ]
        return {"user": self.user, "posts": posts, "next": self.next}


class Newest:
    """An item's posts, ascending (byte order is (time, author, post id) order), and whether
    they are all the author's posts."""

    __slots__ = ("ascending", "complete")

    def __init__(self, ascending: list[str], complete: bool) -> None:
        self.ascending = ascending
        self.complete = complete

    @classmethod
    def parse(cls, value: bytes) -> Newest | None:
        """None for ``~`` or an item not ours (it is filled again)."""
        head, _, rest = value.partition(b" ")
        if head not in (ALL, TOP):
            return None
        try:
            members = rest.decode("ascii").split()
        except UnicodeDecodeError:
            return None
        members.reverse()
        return cls(members, head == ALL)

    @staticmethod
    def encode(posts: list[PostRecord]) -> bytes:
        """``posts``: newest first, one more than the item holds if there are more."""
        head = ALL if len(posts) <= ITEM_POSTS else TOP
        return b" ".join([head, *(TimelineEntry.of(p).member.encode() for p in posts[:ITEM_POSTS])])


class AuthorPages:
    """Not thread-safe: one per thread or task (as the cache client)."""

    def __init__(
        self, cache: Cache, store: PostStore, keys: KeySpace, bodies: PostBodies, heal_s: int
    ) -> None:
        self._cache = cache
        self._fills = cache.fills()  # best-effort: a key moving is answered refused
        self._store = store
        self._keys = keys
        self._bodies = bodies
        self._expire = heal_s  # as every cached item (docs/guarantees.md, bounded self-healing)

    def keys(self, authors: list[str]) -> list[bytes]:
        return self._keys.author_posts_keys(authors)

    def page(self, user: str, limit: int, cursor: str | None) -> AuthorPage:
        """``paging``'s page, read with this process's connections."""
        return run_blocking(self.paging(user, limit, cursor), self._cache)

    def paging(self, user: str, limit: int, cursor: str | None) -> Plan[AuthorPage]:
        """A page as a plan (graph/timelines/plan.py). Raises ``BadCursor`` for a cursor that
        is not a timeline cursor. Posts whose bodies say deleted are skipped and the page reads
        on (the item may not have seen the deletion yet). An item holding a member not of our
        form (bytes corrupted outside: every writer here writes members through
        ``TimelineEntry``) is dropped and filled again, as a corrupt timeline is."""
        before = None if cursor is None else TimelineEntry.from_cursor(cursor)
        try:
            return (yield from self._paged(user, limit, before))
        except CorruptMember:
            yield from blocking("a corrupt author item", lambda: self.invalidate([user]))
            return (yield from self._paged(user, limit, before))

    def _paged(self, user: str, limit: int, before: TimelineEntry | None) -> Plan[AuthorPage]:
        newest = yield from self._newest(user)
        gone: set[str] = set()
        while True:  # each round reads past the deleted posts the last one found
            count = limit + 1 + len(gone)
            posts = yield from self._posts(user, newest, count, before)
            names = [f"{p.author}!{p.post_id}" for p in posts]
            bodies = yield from self._bodies.reading(names, {})
            if bodies.gone <= gone or len(posts) < count:
                break
            gone |= bodies.gone
        shown = [
            PostRecord(p.author, p.post_id, p.ts, bodies.texts.get(name))
            for p, name in zip(posts, names, strict=True)
            if name not in bodies.gone
        ]
        page = shown[:limit]
        more = len(shown) > limit
        nxt = TimelineEntry(page[-1].ts, user, page[-1].post_id).cursor if more else None
        return AuthorPage(user, page, nxt)

    def _posts(
        self, user: str, newest: Newest, count: int, before: TimelineEntry | None
    ) -> Plan[list[PostRecord]]:
        """The ``count`` newest posts older than ``before`` (all posts' order is (time, post id)
        within one author, which is member order): from the item as far as it reaches, then
        from the store (a blocking step)."""
        members = newest.ascending
        end = len(members) if before is None else bisect_left(members, _place(user, before))
        taken = [TimelineEntry.parse(m) for m in reversed(members[max(0, end - count) : end])]
        found = [PostRecord(e.author, e.post_id, e.ts) for e in taken]
        if len(found) < count and not newest.complete:
            last = found[-1] if found else before
            key = None if last is None else PostKey(last.ts, last.post_id)
            wanted = count - len(found)
            found += yield from blocking(
                "an author's older posts", lambda: self._store.author_posts(user, wanted, key)
            )
        return found

    def _newest(self, user: str) -> Plan[Newest]:
        key = self.keys([user])[0]
        item = (yield from multi_get([key])).get(key)
        newest = None if item is None else Newest.parse(item.value)
        if newest is None:
            newest = yield from blocking("an author's posts item", lambda: self._fill(user, key))
        return newest

    def _fill(self, user: str, key: bytes) -> Newest:
        """The fence (module docstring): ``~`` ADDed, read with ``gets``, the store read, CAS.
        An item whose server is unavailable (down, or moving: memcache/ring.py) is answered
        from the store and not written, as is one that begins moving meanwhile."""
        if not self._cache.available([key])[0]:
            posts = self._store.author_posts(user, ITEM_POSTS + 1)
            return Newest.parse(Newest.encode(posts)) or Newest([], True)
        seen: Item | None = filling(self._fills, [key], self._expire).get(key)
        posts = self._store.author_posts(user, ITEM_POSTS + 1)
        value = Newest.encode(posts)
        if seen is not None and Newest.parse(seen.value) is None:
            self._fills.cas_many({key: (value, seen.cas)}, self._expire)
        return Newest.parse(value) or Newest([], True)

    def invalidate(self, authors: list[str]) -> None:
        """After a store write of these authors' posts (a post or a deletion): their items are
        filled again by the next reader, after the write."""
        if authors:
            self._cache.delete_many(self.keys(sorted(set(authors))))


def _place(user: str, before: TimelineEntry) -> str:
    """Where the cursor's (time, post id) falls among ``user``'s members: the cursor's author
    part is not used (module docstring)."""
    return TimelineEntry(before.ts, user, before.post_id).member
