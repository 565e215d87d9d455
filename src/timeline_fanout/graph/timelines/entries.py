"""One home-timeline entry: its member string, its parsed form and its page cursor.

A timeline member is ``{ts:013d}!{author}!{post_id}``: ``!`` is outside the id alphabet and
below every character in it, and the time is zero-padded, so byte order is exactly the order of
(time, author, post id), the order readers and regeneration use. The read path works on the
member strings (graph/timelines/view.py) and parses only the entries it returns.

A page cursor is the member itself: ``CURSOR_PATTERN`` says exactly which strings are cursors,
and every string it admits names a place in any timeline (the entries older than it), so the
API's published pattern and what it accepts are the same set.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from timeline_fanout.graph.lists.tokens import CorruptMember
from timeline_fanout.graph.model.edges import PostRecord
from timeline_fanout.schemas.ids import ID_ALPHABET, ID_MAX_LEN

_PART = f"[{ID_ALPHABET}]{{1,{ID_MAX_LEN}}}"
CURSOR_PATTERN = f"^[0-9]{{13}}!{_PART}!{_PART}$"
_CURSOR_RE = re.compile(CURSOR_PATTERN.removeprefix("^").removesuffix("$"))


class BadCursor(ValueError):
    """A cursor that this service did not make."""


class TimelineEntry(NamedTuple):
    """A tuple (made at C speed, ordered as its fields): a page parses one per entry shown."""

    ts: int
    author: str
    post_id: str

    @property
    def member(self) -> str:
        return f"{self.ts:013d}!{self.author}!{self.post_id}"

    @property
    def post(self) -> str:
        """The post's name, ``{author}!{post_id}`` (graph/timelines/post_bodies.py)."""
        return f"{self.author}!{self.post_id}"

    @classmethod
    def parse(cls, member: str) -> TimelineEntry:
        """Raises ``CorruptMember`` for a string no writer here makes (the read heals it)."""
        try:
            ts, author, post_id = member.split("!")
            return cls(int(ts), author, post_id)
        except ValueError:
            raise CorruptMember(f"not a timeline member: {member[:60]!r}") from None

    @classmethod
    def of(cls, post: PostRecord) -> TimelineEntry:
        return cls(post.ts, post.author, post.post_id)

    @property
    def cursor(self) -> str:
        """The page cursor naming this entry (time, author and post id: a post id alone is
        unique only per author)."""
        return self.member

    @classmethod
    def from_cursor(cls, cursor: str) -> TimelineEntry:
        """Only the member form, spelt one way (13 digits, no sign, no padding elsewhere):
        every spelling of one page would be a page of its own to the page memo
        (graph/timelines/page_memo.py)."""
        if _CURSOR_RE.fullmatch(cursor) is None:
            raise BadCursor(f"not a timeline cursor: {cursor[:40]!r}")
        return cls.parse(cursor)
