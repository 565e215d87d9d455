"""Applying graph events: the edge store first, then the memcached lists.

Tokens are appended only for changes that are the stored state of their edge after the write. A
stale event (older than what the store holds) appends nothing, so a replay from the beginning
never makes a list regress, not even for a moment; a redelivered event is still current and
re-appends its token, which is how a crash between store and lists is repaired.

A removed user's lists and the lists of every neighbour are invalidated rather than patched: the
removal races follows in other partitions, and a rebuild from the store is right by construction.

A follow or unfollow also invalidates the follower's home timeline, after the follower lists are
updated: a timeline is "the newest posts of the authors followed now", and regenerating it is the
only way to backfill a new followee's older posts or to refill the places an unfollowed author's
posts leave behind in a capped timeline. Regeneration is lazy (next read or delivery) and the
read-time filter covers the moment in between.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat

from consumers.positions import Positioned
from graph import EdgeChange, EdgeStore, ListKind, ListRef, ListStore
from schemas import Follow, Unfollow, UserRemoved

GRAPH_EVENTS = (Follow, Unfollow, UserRemoved)


@dataclass(slots=True)
class GraphBatchResult:
    changes: int
    current: int
    removals: int


@dataclass(slots=True)
class Recorded:
    """What a batch did to the edge store, and so what its lists need."""

    changes: int
    current: list[EdgeChange]  # the stored state of their edge now: their tokens are appended
    removals: int
    stale: set[ListRef]  # lists to drop and rebuild instead


class GraphApplier:
    accepted: tuple[type, ...] = GRAPH_EVENTS

    def __init__(self, store: EdgeStore, lists: ListStore) -> None:
        self.store = store
        self.lists = lists

    def apply(self, batch: Sequence[Positioned]) -> GraphBatchResult:
        recorded = self.record(batch)
        self.update_lists(recorded)
        return GraphBatchResult(recorded.changes, len(recorded.current), recorded.removals)

    def record(self, batch: Sequence[Positioned]) -> Recorded:
        """The edge store's part, which comes first (see graph/lists.py)."""
        changes: list[EdgeChange] = []
        removals: list[tuple[str, int]] = []
        for item in batch:
            event = item.event
            if isinstance(event, Follow):
                changes.append(
                    EdgeChange(event.follower, event.followee, True, item.pos, event.group)
                )
            elif isinstance(event, Unfollow):
                changes.append(EdgeChange(event.follower, event.followee, False, item.pos))
            elif isinstance(event, UserRemoved):
                removals.append((event.user, item.pos))

        current = self.store.apply(changes) if changes else []
        stale: set[ListRef] = set()
        for user, pos in removals:
            removed = self.store.remove_user(user, pos)
            stale.update(ListRef(kind, user) for kind in ListKind)
            stale.update(ListRef(ListKind.FOLLOWING, u) for u in removed.followers)
            stale.update(ListRef(ListKind.TIMELINE, u) for u in removed.followers)
            stale.update(ListRef(ListKind.FOLLOWERS, u) for u in removed.following)
        return Recorded(len(changes), current, len(removals), stale)

    def update_lists(self, recorded: Recorded) -> None:
        """Tokens grouped per list by user first, so a list reference is made once per list
        rather than per change."""
        followers: dict[str, list[tuple[bool, str]]] = defaultdict(list)
        following: dict[str, list[tuple[bool, str]]] = defaultdict(list)
        for change in recorded.current:
            followers[change.followee].append((change.active, change.follower))
            following[change.follower].append((change.active, change.followee))
        tokens = {ListRef(ListKind.FOLLOWERS, user): ops for user, ops in followers.items()}
        tokens.update({ListRef(ListKind.FOLLOWING, user): ops for user, ops in following.items()})
        self.lists.apply(tokens)
        self.lists.invalidate(
            recorded.stale.union(map(ListRef, repeat(ListKind.TIMELINE), following))
        )
