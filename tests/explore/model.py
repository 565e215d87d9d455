"""The explorer's own event log and what the graph must be after it, independent of the code.

Events are plain values here (the adapter turns them into the project's events), and the expected
graph is computed straight from the rules in docs/design/lists.md rather than by running any project
code, so that a bug in the edge store itself (not only in the lists) shows up as a difference.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Kind = Literal["follow", "unfollow", "removed", "post", "deleted"]
# Kinds on the posts topic (keyed by author, applied by the fan-out consumer).
POST_KINDS = frozenset({"post", "deleted"})
# A list, named without the project's types: ("followers" | "following" | "timeline", user).
ListId = tuple[str, str]
# A timeline entry, named without the project's types: (time, author, post id).
Entry = tuple[int, str, str]


@dataclass(frozen=True, slots=True)
class Event:
    """One log record. ``user``/``other``: follower/followee, removed user/"", author/post id
    (a post and its deletion). ``partition``/``offset`` place it in the log; ``ts`` is its
    publish time in ms."""

    kind: Kind
    user: str
    other: str
    ts: int
    partition: int
    offset: int

    @property
    def order(self) -> tuple[int, int]:
        """Event time first, the offset as tie-breaker: the order positions encode."""
        return (self.ts, self.offset)

    def __str__(self) -> str:
        what = {
            "follow": f"{self.user}→{self.other}",
            "unfollow": f"{self.user}↛{self.other}",
            "removed": f"remove {self.user}",
            "post": f"post {self.user}/{self.other}",
            "deleted": f"delete {self.user}/{self.other}",
        }[self.kind]
        return f"{what}@{self.ts}p{self.partition}o{self.offset}"


class GraphModel:
    """The graph the events define: per edge the newest follow/unfollow wins; a removal at
    position p switches off every edge of its user older than p and blocks follows older than
    p, whatever order the events were applied in. A post is its first ``post`` event (a post
    published again keeps its first time); a post deleted by any event, before or after any of
    its ``post`` events, is deleted for good."""

    def __init__(self, events: Iterable[Event]) -> None:
        self.latest: dict[tuple[str, str], Event] = {}
        self.removed: dict[str, tuple[int, int]] = {}
        self.posts: dict[tuple[str, str], Event] = {}
        self.deleted: set[tuple[str, str]] = set()
        for e in events:
            if e.kind == "post":
                self.posts.setdefault((e.user, e.other), e)
            elif e.kind == "deleted":
                self.deleted.add((e.user, e.other))
            elif e.kind in ("follow", "unfollow"):
                seen = self.latest.get((e.user, e.other))
                if seen is None or e.order > seen.order:
                    self.latest[(e.user, e.other)] = e
            elif e.kind == "removed":
                self.removed[e.user] = max(self.removed.get(e.user, (-1, -1)), e.order)

    def active(self, follower: str, followee: str) -> bool:
        e = self.latest.get((follower, followee))
        floor = max(self.removed.get(follower, (-1, -1)), self.removed.get(followee, (-1, -1)))
        return e is not None and e.kind == "follow" and e.order > floor

    def members(self, ref: ListId) -> frozenset[str]:
        kind, user = ref
        if kind == "followers":
            return frozenset(f for (f, t) in self.latest if t == user and self.active(f, t))
        if kind == "following":
            return frozenset(t for (f, t) in self.latest if f == user and self.active(f, t))
        raise ValueError(f"the model does not define {kind} lists")

    def timeline(self, user: str, cap: int) -> list[Entry]:
        """What a reader must be shown: the newest ``cap`` live posts of the authors ``user``
        follows, newest first (time, then author and post id)."""
        live = [
            (e.ts, author, post_id)
            for (author, post_id), e in self.posts.items()
            if (author, post_id) not in self.deleted and self.active(user, author)
        ]
        return sorted(live, reverse=True)[:cap]
