"""Applying graph events: the edge store first, then the memcached lists, then a confirmation.

Every token carries the position of its event, and a list member's state is its token with the
greatest position (graph/lists/tokens.py), so tokens commute: a replay, a redelivery, a zombie
consumer
or a consumer of another partition may append in any order and the list still decodes to the
newest state it was told. A token is appended for every change the store did not refuse, stale
or not: a stale token loses to the newer one wherever both are.

One case is left, and it is closed here: a stale *addition* landing in a generation that was
rebuilt from the store after the newer *removal* (a rebuild writes members, not tombstones). So
after appending, the applier reads back every addition it appended and, where the store now
holds the edge switched off at a newer position, appends that removal: it lands after the
stale addition in whatever generation is current, and wins by position. Removals need no such
check: a rebuild writes every member with its position, so a stale removal always loses.

A ``user_removed`` event appends ``-user`` (at the removal's position) to each neighbour's list
instead of dropping those lists: a removal costs a celebrity's follower list one token, not a
rebuild. The removed user's own lists are dropped (fenced, graph/lists/fencing.py).

A follow or unfollow also invalidates the follower's home timeline, after the follower lists are
updated: a timeline is "the newest posts of the authors followed now", and regenerating it is the
only way to backfill a new followee's older posts or to refill the places an unfollowed author's
posts leave behind in a capped timeline. Regeneration is lazy (next read or delivery) and the
read-time filter covers the moment in between.

Every user of the batch's changes and removals has its cached count marked stale
(graph/lists/counts.py), after the store write, whatever the store answered: a change the store
wrote and then switched off again (a follow that lost to a removal committed meanwhile) changed
the count for a moment, and a reader may have counted that moment. A batch applied again after
a crash marks them again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat

from timeline_fanout.consumers.positions import Positioned
from timeline_fanout.consumers.pulse import Pulse, no_pulse
from timeline_fanout.graph import EdgeChange, EdgeGraph, ListKind, ListRef, ShardedLists
from timeline_fanout.graph.lists.counts import CountSource, list_counts
from timeline_fanout.graph.lists.tokens import Change, edge_tokens, encode
from timeline_fanout.schemas import Follow, Unfollow, UserRemoved

GRAPH_EVENTS = (Follow, Unfollow, UserRemoved)
Ops = dict[ListRef, list[Change]]


@dataclass(slots=True)
class GraphBatchResult:
    changes: int
    current: int
    removals: int
    corrections: int = 0


@dataclass(slots=True)
class Recorded:
    """What a batch did to the edge store, and so what its lists need."""

    changes: int
    live: list[EdgeChange]  # not refused by the store: their tokens are appended
    removals: int
    users: set[str] = field(default_factory=set)  # every user of a change or a removal
    removed_ops: Ops = field(default_factory=dict)  # "-user" for each removed user's neighbours
    stale: set[ListRef] = field(default_factory=set)  # lists to drop and rebuild instead


class GraphApplier:
    accepted: tuple[type, ...] = GRAPH_EVENTS

    def __init__(
        self, store: EdgeGraph, lists: ShardedLists, counts: CountSource | None = None
    ) -> None:
        self.store = store
        self.lists = lists
        self.counts = list_counts(store, lists) if counts is None else counts

    def apply(self, batch: Sequence[Positioned], pulse: Pulse = no_pulse) -> GraphBatchResult:
        """The store's part, then the lists' (a batch is bounded by the graph batch size: one
        pulse between the two steps)."""
        recorded = self.record(batch)
        pulse()
        corrections = self.update_lists(recorded)
        return GraphBatchResult(
            recorded.changes, len(recorded.live), recorded.removals, corrections
        )

    def record(self, batch: Sequence[Positioned]) -> Recorded:
        """The edge store's part, which comes first (see graph/lists/fencing.py)."""
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

        live = self.store.apply(changes) if changes else []
        recorded = Recorded(len(changes), live, len(removals))
        recorded.users.update(u for c in changes for u in (c.follower, c.followee))
        for user, pos in removals:
            removed = self.store.remove_user(user, pos)
            recorded.users.update((user, *removed.followers, *removed.following))
            recorded.stale.update(ListRef(kind, user) for kind in ListKind)
            recorded.stale.update(ListRef(ListKind.TIMELINE, u) for u in removed.followers)
            for follower in removed.followers:
                recorded.removed_ops.setdefault(ListRef(ListKind.FOLLOWING, follower), []).append(
                    Change(False, user, pos)
                )
            for followee in removed.following:
                recorded.removed_ops.setdefault(ListRef(ListKind.FOLLOWERS, followee), []).append(
                    Change(False, user, pos)
                )
        return recorded

    def update_lists(self, recorded: Recorded) -> int:
        """Tokens, invalidations, then the confirmation of additions; returns how many
        corrections the confirmation appended."""
        tokens = edge_tokens(recorded.live)
        for ref, removed in recorded.removed_ops.items():
            tokens[ref] = tokens.get(ref, b"") + encode(removed)  # tokens commute
        written = self.lists.append_tokens(tokens)
        self.counts.changed(recorded.users)
        followers_changed = {c.follower for c in recorded.live}
        self.lists.invalidate(
            recorded.stale.union(map(ListRef, repeat(ListKind.TIMELINE), followers_changed))
        )
        additions = [c for c in recorded.live if c.active]
        if written.skipped:  # only those on a list appended to (all of them when none skipped)
            appended = tokens.keys() - written.skipped
            additions = [
                c
                for c in additions
                if ListRef(ListKind.FOLLOWERS, c.followee) in appended
                or ListRef(ListKind.FOLLOWING, c.follower) in appended
            ]
        return self._confirm(additions)

    def _confirm(self, additions: list[EdgeChange]) -> int:
        """Read back what the store holds for each appended addition (after the append, which
        is what makes this right: see the module docstring) and append the newer removal
        where there is one."""
        if not additions:
            return 0
        stored = self.store.positions([c.edge for c in additions])
        superseded = [
            EdgeChange(c.follower, c.followee, False, state.pos)
            for c in additions
            if (state := stored.get(c.edge)) is not None and not state.active and state.pos > c.pos
        ]
        if superseded:
            self.lists.append_tokens(edge_tokens(superseded))
        return len(superseded)
