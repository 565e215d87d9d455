"""Home timelines: capped token lists of posts, plus the read-time merge for celebrities.

A timeline member is ``{ts:013d}!{author}!{post_id}``: ``!`` is outside the id alphabet and
below every character in it, and the time is zero-padded, so byte order is exactly the order of
(time, author, post id), the order readers and regeneration use, which is what capped
compaction keeps the greatest of. A post delivered twice (at-least-once) is the same member
twice, so a read never shows it twice.

What a reader sees is defined as: the newest ``cap`` posts by the authors the reader follows now.
Posts of authors the reader no longer follows are filtered out at read time (cheaper and safer
than chasing them through every timeline on unfollow); posts of celebrities, which are never
fanned out, are merged in at read time from cached answers of the edge store
(graph/timelines/celebrity_posts.py: stale by at most a stated bound). Regeneration builds the same
thing from the edge store, so a lost timeline comes back with the same answers.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import chain
from typing import NamedTuple

from timeline_fanout.graph.lists.capped import CappedLists
from timeline_fanout.graph.lists.sharded import ShardedLists
from timeline_fanout.graph.lists.tokens import CorruptList, CorruptMember
from timeline_fanout.graph.model.edges import GraphAndPosts, PostsAndCelebrities, Snapshot
from timeline_fanout.graph.model.keys import ListKind, ListRef
from timeline_fanout.graph.timelines.author_pages import AuthorPages
from timeline_fanout.graph.timelines.celebrity_posts import CelebrityPosts
from timeline_fanout.graph.timelines.entries import BadCursor, TimelineEntry
from timeline_fanout.graph.timelines.fetch import Batch, Fetched, ReadMemory, TimelineFetch
from timeline_fanout.graph.timelines.known_texts import KnownTexts
from timeline_fanout.graph.timelines.plan import Plan, blocking, run_blocking
from timeline_fanout.graph.timelines.post_bodies import PostBodies, post_name
from timeline_fanout.graph.timelines.view import followed_posts, visible_page

__all__ = ["BadCursor", "TimelineEntry", "TimelinePage", "TimelineReader", "TimelineSource"]


@dataclass(frozen=True, slots=True)
class TimelinePage:
    """One page of a home timeline, newest first; ``next`` is the cursor of the last entry when
    an older page exists, ``None`` at the end. The CLI and the HTTP API both serve this."""

    user: str
    entries: list[TimelineEntry]
    next: str | None
    # How many users the reader followed in the following list the page was read through. Not
    # 0 means the user is known (has an edge), so an empty page is a known user's empty page.
    following: int
    texts: list[str | None]  # each entry's post text (graph/timelines/post_bodies.py)

    def body(self) -> dict[str, object]:
        """The page as the API and ``fanout timeline --json`` give it."""
        posts = [
            {"post_id": e.post_id, "author": e.author, "ts": e.ts, "text": text}
            for e, text in zip(self.entries, self.texts, strict=True)
        ]
        return {"user": self.user, "posts": posts, "next": self.next}


class Walked(NamedTuple):
    """Entries walked from one read, with the size of the following list they were read
    through (``TimelinePage.following``) and their texts."""

    entries: list[TimelineEntry]
    following: int
    texts: list[str | None]


class TimelineSource:
    """What a missing timeline is regenerated from: recent posts of the user's followees."""

    def __init__(self, store: GraphAndPosts, cap: int) -> None:
        self._store = store
        self._cap = cap

    def snapshot(self, ref: ListRef) -> Snapshot:
        followees = self._store.all_members(ListRef(ListKind.FOLLOWING, ref.user))
        posts = self._store.recent_posts(followees, self._cap)
        return Snapshot([TimelineEntry.of(p).member for p in posts], None)


class TimelineReader:
    """Reads home timelines: one multi-GET when warm (graph/timelines/fetch.py), a walk over the
    member strings (graph/timelines/view.py), no store query unless something was missing.
    Not thread-safe: one reader per thread or task."""

    def __init__(
        self,
        store: PostsAndCelebrities,
        follow_lists: ShardedLists,
        timelines: CappedLists,
        cap: int,
        celebrity_posts: CelebrityPosts | None = None,
        memory: ReadMemory | None = None,
        known: KnownTexts | None = None,
    ) -> None:
        """``memory`` and ``known`` (the post texts known under a deletion mark,
        graph/timelines/known_texts.py): shared by the readers of a process; their own if None.
        Deletion marks are made, and the deadlines of known texts and (unless
        ``celebrity_posts`` is given) of celebrity items read, with the timelines' ``fresh``
        (graph/model/fresh.py)."""
        self.follow_lists = follow_lists
        self.timelines = timelines
        self._cap = cap
        self.celebrity_posts = celebrity_posts or CelebrityPosts(
            timelines.cache, store, timelines.keys, cap, fresh=timelines.context.fresh
        )
        self.fetcher = TimelineFetch(follow_lists, timelines, self.celebrity_posts, memory)
        heal_s = timelines.settings.heal_s
        self.bodies = PostBodies(
            timelines.cache, store, timelines.keys, heal_s, known, timelines.context.fresh
        )
        self.author_pages = AuthorPages(timelines.cache, store, timelines.keys, self.bodies, heal_s)

    def page(self, user: str, limit: int = 50, cursor: str | None = None) -> TimelinePage:
        """A page of ``user``'s home timeline, read with this reader's connections (``paging``
        run by ``run_blocking``): what ``fanout timeline`` and the API's request threads serve.

        Args:
            user: The reader's id.
            limit: Entries on the page (one more is read to know whether an older page exists).
            cursor: A page's ``next``, for the entries older than its last one; None for the
                newest.

        Returns:
            The page, newest first, with each entry's post text (None for a post without one)
            and the cursor of the next page (None at the end).

        Raises:
            BadCursor: ``cursor`` is not one of ours.
        """
        return run_blocking(self.paging(user, limit, cursor), self.timelines.cache)

    def paging(
        self, user: str, limit: int, cursor: str | None, first: Batch | None = None
    ) -> Plan[TimelinePage]:
        """A page of ``limit`` entries older than ``cursor`` (``BadCursor`` if it is not one of
        ours), as a plan (graph/timelines/plan.py). One more entry than asked is read to know
        whether an older page exists. ``first``: the read's first multi-GET, already made (the
        event loop's, graph/timelines/warm_reads.py)."""
        before = None if cursor is None else TimelineEntry.from_cursor(cursor)
        walked = yield from self.walking(user, limit + 1, before, first)
        more = len(walked.entries) > limit
        entries = walked.entries[:limit]
        cursor_next = entries[-1].cursor if more and entries else None
        return TimelinePage(user, entries, cursor_next, walked.following, walked.texts[:limit])

    def read(
        self, user: str, limit: int = 50, before: TimelineEntry | None = None
    ) -> list[TimelineEntry]:
        """Newest first; ``before`` (from a cursor): only entries older than that one (see
        ``walking``)."""
        plan = self.walking(user, limit, before)
        return run_blocking(plan, self.timelines.cache).entries

    def walking(
        self, user: str, limit: int, before: TimelineEntry | None = None, first: Batch | None = None
    ) -> Plan[Walked]:
        """``read``'s entries with the size of the following list they were read through.

        A timeline whose members are not of our own form (bytes corrupted outside: every writer
        here writes members through ``TimelineEntry``) is dropped and regenerated, as a corrupt
        list is (docs/design/lists.md, "Broken lists"), and so are the posts items of the
        celebrities merged into it; found when a read walks the bad member."""
        if limit < 1:
            return Walked([], 0, [])
        cursor = None if before is None else before.member
        try:
            return (yield from self._reading(user, limit, cursor, first))
        except (CorruptList, CorruptMember):
            ref = ListRef(ListKind.TIMELINE, user)
            yield from blocking("a corrupt timeline", functools.partial(self._dropped, ref))
            return (yield from self._reading(user, limit, cursor, None))

    def _reading(
        self, user: str, limit: int, cursor: str | None, first: Batch | None
    ) -> Plan[Walked]:
        if first is None:
            got = yield from self.fetcher.fetching(user)
        else:
            got = yield from self.fetcher.settling(user, first.last, dict(first.found))
        try:
            return (yield from self._showing(user, got, limit, cursor))
        except (CorruptList, CorruptMember):
            # The bad member may be in a celebrity's posts item as well as in the timeline:
            # those are rebuilt from the store by the read that ``walking`` tries next.
            yield from self.celebrity_posts.dropping(got.celebrities)
            raise

    def _showing(self, user: str, got: Fetched, limit: int, cursor: str | None) -> Plan[Walked]:
        """The page walked through the posts that exist (graph/timelines/post_bodies.py): the
        bodies of the entries a walk would show are read, and while some say deleted the walk
        is done again without them, reading ahead further each time (twice as far, plus the
        deletions just found and a page), so a run of deleted posts costs a few rounds, not one
        per post.
        A walk shorter than it asked ends the view, which is where the cap cuts: there the
        bodies of every post walked above it are read too, so that deleted posts are not
        counted towards the cap (the view is the newest ``cap`` posts that exist)."""
        yield from self.bodies.keeping_mark(user, got.found)
        gone: frozenset[str] = frozenset()
        ahead = 0
        while True:
            entries = yield from self._walking(user, got, limit + ahead, cursor, gone)
            names = [e.post for e in entries]
            if len(entries) < limit + ahead:
                down_to = entries[-1].member if entries else (cursor or "")
                above = yield from self._walked_above(got, down_to)
                names = list(dict.fromkeys(names + above))
            bodies = yield from self.bodies.reading(names, got.found)
            found = bodies.gone - gone
            if not found:
                break
            yield from self._drop_stale_celebrities(got, found)
            gone |= found
            ahead = 2 * ahead + len(found) + limit
        entries = entries[:limit]
        # ``names`` starts with the entries' own names, in order (the walk shows a post once).
        texts = list(map(bodies.texts.get, names[: len(entries)]))
        return Walked(entries, len(got.following), texts)

    def _drop_stale_celebrities(self, got: Fetched, deleted: set[str]) -> Plan[None]:
        """A celebrity's cached posts holding a deleted post are stale: written from a store
        read before the deletion (the consumer rewrites them after it; a zombie or a replay can
        write an older answer after that). They lack the older post the view shows in its
        place, so they are dropped and rebuilt from the store, by this read, at once (a
        blocking step)."""
        authors = sorted({post.partition("!")[0] for post in deleted} & set(got.celebrities))
        if not authors:
            return
        recent = yield from self.celebrity_posts.recent(authors, got.found)
        stale = [
            author
            for author, r in zip(authors, recent, strict=True)
            if any(post_name(m) in deleted for m in r.members)
        ]
        if stale:
            yield from self.celebrity_posts.dropping(stale)
            for key in self.celebrity_posts.keys(stale):
                got.found.pop(key, None)

    def _walked_above(self, got: Fetched, down_to: str) -> Plan[list[str]]:
        """Posts of authors followed at or above ``down_to``, among the delivered members and
        the followed celebrities' recent posts."""
        recent = yield from self.celebrity_posts.recent(got.celebrities, got.found)
        candidates = sorted(chain(got.delivered, *(r.members for r in recent)))
        return followed_posts(candidates, got.following, down_to)

    def _walking(
        self, user: str, got: Fetched, limit: int, cursor: str | None, gone: frozenset[str]
    ) -> Plan[list[TimelineEntry]]:
        delivered = got.delivered
        delivered.sort()  # in item order it is nearly sorted already
        # Without a cursor, a page of ``limit`` usually needs no more than the newest
        # ``2 * limit`` delivered members and each celebrity's newest ``limit`` posts; each cut
        # is a floor for the walk (graph/timelines/view.py), and crossing one widens the read.
        window: int | None = 2 * limit if cursor is None else None
        kept = self.kept_from(delivered)
        while True:
            first = None if window is None else limit
            recent = yield from self.celebrity_posts.recent(got.celebrities, got.found, first)
            cut = max((r.members[-1] for r in recent if not r.complete), default="")
            part = delivered if window is None else delivered[-window:]
            if len(part) < len(delivered):
                cut = max(cut, part[0])
            candidates = part
            if recent:
                candidates = sorted(chain(part, *(r.members for r in recent)))
            floor = max(cut, kept)
            shown = visible_page(candidates, got.following, self._cap, limit, cursor, floor, gone)
            if shown is not None:
                return shown
            if cut >= kept:
                window = None  # read everything fetched, in full
                continue
            kept = ""
            if self.displaced(frozenset(delivered), got.following, gone):
                delivered = yield from blocking(
                    "a displaced timeline", functools.partial(self._regenerated, user)
                )

    def _dropped(self, ref: ListRef) -> None:
        """A timeline dropped (corrupt, or to be regenerated), unless it began moving between
        servers (``TokenLists.drop``)."""
        self.timelines.drop([ref])

    def _regenerated(self, user: str) -> list[str]:
        """``user``'s timeline dropped and read again (rebuilt from the store), ascending. A
        timeline that began moving between servers (memcache/ring.py) is left where it is, and
        read from the store."""
        ref = ListRef(ListKind.TIMELINE, user)
        self._dropped(ref)
        return sorted(self.timelines.read(ref))

    def kept_from(self, ascending: list[str]) -> str:
        """The member down to which a timeline is known to be whole: "" if it holds fewer than
        ``cap`` members, else its ``cap``-th newest (counting a duplicate twice only moves it
        up, which is safe).

        Every trim and every rebuild keeps the newest ``cap`` members it sees, so all it left
        out is older than each member it kept; appends only add members, so the ``cap``-th
        newest never moves down. Hence nothing was ever left out at or above it. Not the
        oldest member: a post older than a trim can be delivered after it (a retried batch, a
        chunk task held up by an outage) and would then stand in for the newer posts the trim
        pushed out."""
        return ascending[-self._cap] if len(ascending) >= self._cap else ""

    def displaced(
        self, delivered: frozenset[str], following: frozenset[str], gone: frozenset[str]
    ) -> bool:
        """A full timeline holding posts of authors no longer followed, or deleted posts: a
        delivery that was in flight during an unfollow (or a removal) landed after the
        regeneration, or posts were deleted, and trimming to the cap may have pushed out older
        posts that the reader must see. Regenerate (from the store, which has no deleted
        posts). (Checked only when a page reaches below ``kept_from``: down to it, the entries
        of authors followed are all there.)"""
        return len(delivered) >= self._cap and any(
            m.split("!")[1] not in following or post_name(m) in gone for m in delivered
        )

    def view(
        self, user: str, delivered: Iterable[str], following: frozenset[str]
    ) -> list[TimelineEntry]:
        """What a reader is shown of a cached timeline, in full: entries of authors followed
        now, the celebrities' recent posts merged in, one entry per post that exists, newest
        ``cap`` first (``fanout verify`` compares this with the store). Where a reader would
        regenerate (a full timeline that holds posts deleted or of authors not followed, when
        the view reaches below its floor), this is the view of what the regeneration reads."""
        members = sorted(delivered)
        recent = self.celebrity_posts.followed(following)
        regenerated = False
        while True:
            candidates = sorted(chain(members, *(r.members for r in recent)))
            posts = followed_posts(candidates, following, "")
            gone = frozenset(self.bodies.read(posts, {}).gone)
            floor = "" if regenerated else self.kept_from(members)
            shown = visible_page(candidates, following, self._cap, self._cap, None, floor, gone)
            if shown is not None:
                return shown
            if not self.displaced(frozenset(members), following, gone):
                return visible_page(candidates, following, self._cap, self._cap, gone=gone) or []
            members = sorted(
                self.timelines.source.snapshot(ListRef(ListKind.TIMELINE, user)).members
            )
            regenerated = True
