"""The edge store contract: the source of truth for the follower graph.

Edge writes follow FlockDB: every edge keeps the position of the event that last set it, and a
write only lands when its position is newer, so applying events twice or out of order converges on
the same state and a replay never regresses it. An unfollow leaves an inactive edge behind (a
tombstone carrying its position) for the same reason, and a removed user keeps the position of its
removal so that an older follow arriving late cannot bring an edge back.

What converges is whether each edge is active, and the lists built from that. The position
stored on an edge that is off is the position of the write that switched it off: a removal
switches off only the user's active edges, so a tombstone already there keeps its own
(older) position, and which of an unfollow and a removal switched an edge off can depend on
arrival order. In a MongoDB store with a separate ``following`` collection the two copies of
an edge can likewise end off at different positions. Neither changes whether an edge is active.

The contract is split into roles (``EdgeGraph``, ``PostStore``, ``CelebrityRegistry``), and each
caller takes the role or roles it uses; ``EdgeStore`` is all of them and ``close``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from timeline_fanout.graph.model.keys import ListRef


class EdgeChange(NamedTuple):
    """A tuple: the graph consumer makes one per event, and a tuple is made at C speed."""

    follower: str
    followee: str
    active: bool
    pos: int
    group: str | None = None

    @property
    def edge(self) -> tuple[str, str]:
        return (self.follower, self.followee)


class Snapshot(NamedTuple):
    """What a list holds according to the source of truth: members, and for positioned lists
    (follower/following) the position of the write that made each one a member."""

    members: list[str]
    positions: list[int] | None


class EdgeState(NamedTuple):
    """What the store holds for one edge."""

    active: bool
    pos: int


@dataclass(frozen=True, slots=True)
class PostRecord:
    author: str
    post_id: str
    ts: int
    text: str | None = None


class PostKey(NamedTuple):
    """Where a page of one author's posts stops: its last post's time and id (an author's
    posts are ordered by time, then id)."""

    ts: int
    post_id: str


class PostRef(NamedTuple):
    """One post by name: a post id is unique only per author."""

    author: str
    post_id: str


@dataclass(frozen=True, slots=True)
class StoredBodies:
    """What the store holds for some posts: the live ones' texts (None: a post without text)
    and the deleted ones. A post in neither was never stored nor deleted."""

    texts: dict[PostRef, str | None]
    deleted: set[PostRef]


def newest_first(posts: Iterable[PostRecord], limit: int) -> list[PostRecord]:
    """One total order for posts everywhere: time, then author and id to break ties."""
    return sorted(posts, key=lambda p: (p.ts, p.author, p.post_id), reverse=True)[:limit]


@dataclass(frozen=True, slots=True)
class EdgeCounts:
    followers: int
    following: int


@dataclass(frozen=True, slots=True)
class RemovedUser:
    """Neighbours whose edge with the removed user was switched off by this removal."""

    followers: tuple[str, ...]
    following: tuple[str, ...]


def collapse(changes: Iterable[EdgeChange]) -> list[EdgeChange]:
    """Keep one change per edge, the newest; unordered bulk writes must not race themselves."""
    newest: dict[tuple[str, str], EdgeChange] = {}
    for change in changes:
        seen = newest.get(change.edge)
        if seen is None or change.pos >= seen.pos:
            newest[change.edge] = change
    return list(newest.values())


def prepare(
    changes: Iterable[EdgeChange], removed_at: Callable[[set[str]], dict[str, int]]
) -> list[EdgeChange]:
    """Collapse a batch and drop follows older than a removal of either endpoint, which must
    not bring an edge back. ``removed_at`` looks up the removal positions of the given users."""
    batch = collapse(changes)
    removed = removed_at({u for c in batch for u in c.edge})
    return [
        c
        for c in batch
        if not c.active or c.pos > max(removed.get(c.follower, -1), removed.get(c.followee, -1))
    ]


class EdgeGraph(Protocol):
    """The follower graph: edges with their positions, their counts, removed users and who is
    known. A role of the store because most of its callers need the graph and nothing else:
    the graph consumer writes it (consumers/graph_apply.py), the counts are read from it
    (graph/lists/counts.py) and the read API pages it (api/routes/users.py, known.py); the
    timelines' regeneration and anti-entropy read it beside the posts (``GraphAndPosts``)."""

    # Whether ``counts`` is one lookup (kept as edges change state) or a count of the edges,
    # which then needs a cache in front of it (graph/lists/counts.py).
    counts_kept: bool

    def apply(self, changes: Sequence[EdgeChange]) -> list[EdgeChange]:
        """Write a batch (each edge only where the change is newer than what is stored);
        return the changes that were not refused for being older than a removal of one of
        their users. Atomic with respect to removals: a follow older than a removal never
        stays active, whichever commits first."""
        ...

    def positions(self, edges: Sequence[tuple[str, str]]) -> dict[tuple[str, str], EdgeState]:
        """What the store holds now for each ``(follower, followee)``; absent edges left out."""
        ...

    def remove_user(self, user: str, pos: int) -> RemovedUser:
        """Idempotent: a second call with the same position names the same neighbours."""
        ...

    def snapshot(self, ref: ListRef) -> Snapshot:
        """A follower or following list with each member's position."""
        ...

    def followers(
        self, user: str, *, group: str | None = None, after: str | None = None, limit: int = 1000
    ) -> list[str]:
        """Active followers sorted by id, those after ``after`` only, at most ``limit`` (none
        when ``limit`` < 1); ``group`` keeps the edges of that group."""
        ...

    def following(
        self, user: str, *, group: str | None = None, after: str | None = None, limit: int = 1000
    ) -> list[str]: ...

    def counts(self, user: str) -> EdgeCounts:
        """Active followers and following: one lookup where ``counts_kept`` (each store's
        module says how exact), else counted like ``recounted``."""
        ...

    def recounted(self, user: str) -> EdgeCounts:
        """The same counts computed from the edges (a scan of both lists): what ``counts``
        must equal once writers are done."""
        ...

    def is_following(self, follower: str, followee: str) -> bool: ...

    def users(self) -> Iterator[str]:
        """Every user with at least one edge, active or not, in either direction: a user whose
        last edge was switched off can still have a stale cached list, so ``fanout verify``
        samples and ``rebuild-cache`` rewrites from this."""
        ...

    def known_users(self, users: Collection[str]) -> set[str]:
        """Those of ``users`` the graph knows (see ``known``): what tells an unknown user
        (404) from a known one with nothing yet (an empty list) at the read API."""
        ...

    def all_members(self, ref: ListRef) -> list[str]: ...


class PostStore(Protocol):
    """Posts, their texts and their tombstones. A role of the store because the post bodies and
    the author pages (graph/timelines/post_bodies.py, author_pages.py) need the posts and
    nothing else; the timelines' regeneration reads them beside the graph (``GraphAndPosts``),
    the fan-out consumer and the celebrities' cached posts beside the celebrities
    (``PostsAndCelebrities``)."""

    def store_posts(self, posts: Sequence[PostRecord]) -> dict[PostRef, PostRecord]:
        """Idempotent: storing a post again changes nothing. Returns each live post as stored:
        the first one stored wins (time and text), so a post published twice with a new
        ``ts`` is still one timeline entry. A deleted post is absent from the answer and stays
        deleted (``delete_posts``)."""
        ...

    def delete_posts(self, posts: Sequence[PostRef]) -> dict[PostRef, int]:
        """Permanent and idempotent: each post becomes a tombstone (its text is dropped), in
        no page or recent-posts answer from then on, and a ``store_posts`` of it later (a
        retry, a replay) stores nothing. Deleting a post not stored yet records the
        tombstone first. Each post's tombstone is one atomic write that a concurrent
        ``store_posts`` of it either precedes (and is overwritten) or follows (and is
        refused). Returns the stored time of each of ``posts`` that had been stored (the
        tombstone keeps it: a retried deletion gets it too)."""
        ...

    def post_bodies(self, posts: Collection[PostRef]) -> StoredBodies:
        """The texts of the live ones among ``posts`` and which are deleted: one query per few
        hundred posts, what a page's texts are filled from."""
        ...

    def recent_posts(self, authors: Collection[str], limit: int) -> list[PostRecord]:
        """The newest ``limit`` posts by any of ``authors``, newest first."""
        ...

    def author_posts(
        self, author: str, limit: int, before: PostKey | None = None
    ) -> list[PostRecord]:
        """One author's posts older than ``before`` (all when None), newest first, at most
        ``limit``: one range of the store's index on (author, time), whatever the author's
        number of posts."""
        ...


class CelebrityRegistry(Protocol):
    """Who is a celebrity. A role of the store because it is read and written only beside the
    posts (``PostsAndCelebrities``): the fan-out consumer records celebrities
    (consumers/fanout_apply.py) and the celebrities' cached posts are built from them
    (graph/timelines/celebrity_posts.py)."""

    def add_celebrities(self, users: Iterable[str]) -> None:
        """Authors whose posts are merged at read time instead of fanned out (sticky)."""
        ...

    def celebrities(self) -> set[str]: ...


class GraphAndPosts(EdgeGraph, PostStore, Protocol):
    """What a timeline is built from: a user's followees and their recent posts
    (graph/timelines/reader.py's ``TimelineSource``, graph/anti_entropy.py)."""


class PostsAndCelebrities(PostStore, CelebrityRegistry, Protocol):
    """Posts and who is a celebrity: what the fan-out consumer writes
    (consumers/fanout_apply.py) and a timeline reader's celebrities' posts and texts are read
    from (graph/timelines/celebrity_posts.py, reader.py)."""


class EdgeStore(EdgeGraph, PostStore, CelebrityRegistry, Protocol):
    """The whole store, as the SQLite and MongoDB stores implement it and the CLI's wiring
    opens it (cli/wiring.py): every role, and ``close``."""

    def close(self) -> None: ...


def known(active: set[str], seen: set[str], removed: set[str]) -> set[str]:
    """The rule both stores apply: a user is known when it has an active edge (either
    direction), or when it is not removed and appears in any edge (active or not) or has a
    post. A removed user is unknown until a follow newer than its removal makes it active
    again (its old, switched-off edges and its posts do not count)."""
    return active | (seen - removed)
