"""One home-timeline entry: its member string, its parsed form and its page cursor.

A timeline member is ``{ts:013d}!{author}!{post_id}``: ``!`` is outside the id alphabet and
below every character in it, and the time is zero-padded, so byte order is exactly the order of
(time, author, post id), the order readers and regeneration use. The read path works on the
member strings (graph/timelines/view.py) and parses only the entries it returns.
"""

from __future__ import annotations

import base64
import binascii
from typing import NamedTuple

from graph.model.edges import PostRecord


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
        # A member's own form (no sign, no spaces), and the cursor exactly as ``cursor`` spells
        # it: the decoder skips characters outside the alphabet, and every spelling of one page
        # would be a page of its own to the page memo (graph/timelines/page_memo.py).
        if entry.member != member or not ts.isdigit() or entry.cursor != cursor:
            raise BadCursor(f"not a timeline cursor: {cursor[:40]!r}")
        return entry
