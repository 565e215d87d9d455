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

from consumers.positions import Positioned
from graph import EdgeChange, EdgeStore, ListKind, ListRef, ListStore
from schemas import Follow, Unfollow, UserRemoved

GRAPH_EVENTS = (Follow, Unfollow, UserRemoved)


@dataclass(slots=True)
class GraphBatchResult:
    changes: int
    current: int
    removals: int


class GraphApplier:
    accepted: tuple[type, ...] = GRAPH_EVENTS

    def __init__(self, store: EdgeStore, lists: ListStore) -> None:
        self.store = store
        self.lists = lists

    def apply(self, batch: Sequence[Positioned]) -> GraphBatchResult:
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
        stale_lists: set[ListRef] = set()
        for user, pos in removals:
            removed = self.store.remove_user(user, pos)
            stale_lists.update(ListRef(kind, user) for kind in ListKind)
            stale_lists.update(ListRef(ListKind.FOLLOWING, u) for u in removed.followers)
            stale_lists.update(ListRef(ListKind.TIMELINE, u) for u in removed.followers)
            stale_lists.update(ListRef(ListKind.FOLLOWERS, u) for u in removed.following)

        tokens: dict[ListRef, list[tuple[bool, str]]] = defaultdict(list)
        for change in current:
            tokens[ListRef(ListKind.FOLLOWERS, change.followee)].append(
                (change.active, change.follower)
            )
            tokens[ListRef(ListKind.FOLLOWING, change.follower)].append(
                (change.active, change.followee)
            )
            stale_lists.add(ListRef(ListKind.TIMELINE, change.follower))
        self.lists.apply(tokens)
        self.lists.invalidate(stale_lists)
        return GraphBatchResult(len(changes), len(current), len(removals))
