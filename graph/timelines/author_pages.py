"""Pages of one author's posts, newest first, for ``GET /v1/users/{user}/posts`` and ``fanout
posts``: one range of the edge store's index on (author, time) past the cursor, so a page
costs the same however many posts the author has.

The cursor is the timelines' (``time!author!post_id``, graph/timelines/entries.py), naming the
last post shown. Its time and post id are a place in any author's posts (the author part is
not needed to find it), so any well-formed cursor is a place, as any id is in a member list.
"""

from __future__ import annotations

from dataclasses import dataclass

from graph.model.edges import EdgeStore, PostKey, PostRecord
from graph.timelines.entries import TimelineEntry


@dataclass(frozen=True, slots=True)
class AuthorPage:
    user: str
    posts: list[PostRecord]
    next: str | None  # the cursor of the last post shown; None at the end


def author_page(store: EdgeStore, user: str, limit: int, cursor: str | None) -> AuthorPage:
    """Raises ``BadCursor`` for a cursor that is not a timeline cursor."""
    before = None
    if cursor is not None:
        entry = TimelineEntry.from_cursor(cursor)
        before = PostKey(entry.ts, entry.post_id)
    found = store.author_posts(user, limit + 1, before)
    posts = found[:limit]
    nxt = (
        TimelineEntry(posts[-1].ts, user, posts[-1].post_id).cursor if len(found) > limit else None
    )
    return AuthorPage(user, posts, nxt)


def page_body(page: AuthorPage) -> dict[str, object]:
    """The page as the API and ``fanout posts --json`` give it."""
    posts = [
        {"post_id": p.post_id, "author": p.author, "ts": p.ts, "text": p.text} for p in page.posts
    ]
    return {"user": page.user, "posts": posts, "next": page.next}
