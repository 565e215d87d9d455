"""Home timelines: capped token lists of posts, plus the read-time merge for celebrities.

A timeline member is ``{ts:013d}!{author}!{post_id}``: ``!`` is outside the id alphabet and
below every character in it, and the time is zero-padded, so byte order is exactly the order of
(time, author, post id), the order readers and regeneration use, which is what capped
compaction keeps the greatest of. A post delivered twice (at-least-once) is the same member
twice, so a read never shows it twice.

What a reader sees is defined as: the newest ``cap`` posts by the authors the reader follows now.
Posts of authors the reader no longer follows are filtered out at read time (cheaper and safer
than chasing them through every timeline on unfollow); posts of celebrities, which are never
fanned out, are merged in from the edge store at read time. Regeneration builds the same thing
from the edge store, so a lost timeline comes back with the same answers.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from dataclasses import dataclass

from graph.edges import EdgeStore, PostRecord
from graph.keys import ListKind, ListRef
from graph.lists import Snapshot, TokenLists


class BadCursor(ValueError):
    """A cursor that this service did not make."""


@dataclass(frozen=True, slots=True, order=True)
class TimelineEntry:
    ts: int
    author: str
    post_id: str

    @property
    def member(self) -> str:
        return f"{self.ts:013d}!{self.author}!{self.post_id}"

    @classmethod
    def parse(cls, member: str) -> TimelineEntry:
        ts, author, post_id = member.split("!")
        return cls(int(ts), author, post_id)

    @classmethod
    def of(cls, post: PostRecord) -> TimelineEntry:
        return cls(post.ts, post.author, post.post_id)

    @property
    def cursor(self) -> str:
        """An opaque page cursor naming this entry (time, author and post id: a post id alone
        is unique only per author)."""
        return base64.urlsafe_b64encode(self.member.encode("ascii")).rstrip(b"=").decode()

    @classmethod
    def from_cursor(cls, cursor: str) -> TimelineEntry:
        try:
            member = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
            ts, author, post_id = member.split("!")
            entry = cls(int(ts), author, post_id)
        except (binascii.Error, UnicodeDecodeError, ValueError):
            raise BadCursor(f"not a timeline cursor: {cursor[:40]!r}") from None
        if entry.member != member:
            raise BadCursor(f"not a timeline cursor: {cursor[:40]!r}")
        return entry


@dataclass(frozen=True, slots=True)
class TimelinePage:
    """One page of a home timeline, newest first; ``next`` is the cursor of the last entry when
    an older page exists, ``None`` at the end. The CLI and the HTTP API both serve this."""

    user: str
    entries: list[TimelineEntry]
    next: str | None


class TimelineSource:
    """What a missing timeline is regenerated from: recent posts of the user's followees."""

    def __init__(self, store: EdgeStore, cap: int) -> None:
        self._store = store
        self._cap = cap

    def snapshot(self, ref: ListRef) -> Snapshot:
        followees = self._store.all_members(ListRef(ListKind.FOLLOWING, ref.user))
        posts = self._store.recent_posts(followees, self._cap)
        return Snapshot([TimelineEntry.of(p).member for p in posts], None)


class TimelineReader:
    def __init__(
        self, store: EdgeStore, follow_lists: TokenLists, timelines: TokenLists, cap: int
    ) -> None:
        self._store = store
        self.follow_lists = follow_lists
        self.timelines = timelines
        self._cap = cap

    def page(self, user: str, limit: int = 50, cursor: str | None = None) -> TimelinePage:
        """A page of ``limit`` entries older than ``cursor`` (``BadCursor`` if it is not one of
        ours). One more entry than asked is read to know whether an older page exists."""
        before = None if cursor is None else TimelineEntry.from_cursor(cursor)
        entries = self.read(user, limit + 1, before)
        more = len(entries) > limit
        entries = entries[:limit]
        return TimelinePage(user, entries, entries[-1].cursor if more and entries else None)

    def read(
        self, user: str, limit: int = 50, before: TimelineEntry | None = None
    ) -> list[TimelineEntry]:
        """Newest first; ``before`` (from a cursor): only entries older than that one."""
        following = self.follow_lists.read(ListRef(ListKind.FOLLOWING, user))
        ref = ListRef(ListKind.TIMELINE, user)
        delivered = self.timelines.read(ref)
        if self.displaced(delivered, following):
            self.timelines.invalidate([ref])
            delivered = self.timelines.read(ref)
        merged = self.view(delivered, following)
        if before is not None:
            merged = [e for e in merged if e < before]
        return merged[:limit]

    def displaced(self, delivered: frozenset[str], following: frozenset[str]) -> bool:
        """A full timeline holding posts of authors no longer followed: a delivery that was in
        flight during an unfollow (or a removal) landed after the regeneration, and trimming
        to the cap may have pushed out older posts that the reader must see. Regenerate."""
        return len(delivered) >= self._cap and any(
            TimelineEntry.parse(m).author not in following for m in delivered
        )

    def view(self, delivered: Iterable[str], following: frozenset[str]) -> list[TimelineEntry]:
        """What a reader is shown of a cached timeline: entries of authors followed now, the
        celebrities' recent posts merged in, one entry per post, newest ``cap`` first."""
        celebrities = self._store.celebrities() & following
        return self._merge(
            (TimelineEntry.parse(m) for m in delivered),
            self._store.recent_posts(celebrities, self._cap) if celebrities else [],
            following,
        )

    def _merge(
        self,
        delivered: Iterable[TimelineEntry],
        merged_in: Iterable[PostRecord],
        following: frozenset[str],
    ) -> list[TimelineEntry]:
        entries = {e for e in delivered if e.author in following}
        entries.update(TimelineEntry.of(p) for p in merged_in)
        # One post is one entry, whatever its duplicates said (an entry delivered before the
        # store settled its time): the newest wins, as in the order newest_first uses.
        unique: dict[tuple[str, str], TimelineEntry] = {}
        for entry in sorted(entries, reverse=True):
            unique.setdefault((entry.author, entry.post_id), entry)
        return list(unique.values())[: self._cap]
