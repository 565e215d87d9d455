"""Everything a timeline read needs, in one round trip per memcached server.

A read needs the reader's following list (its head item, then the shards the head names), its
timeline item, the celebrity set and the recent-posts items of the celebrities it follows
(graph/timelines/celebrity_posts.py). In dependency order that is three or four round trips. Here
it is
one multi-GET: the fetcher remembers, per user (in-process, least recently used first out), the
following list's head value and the celebrities the user followed at its last read (with the
keys of the next batch, derived from those once), and asks for the shards that head names and
those celebrities' items in the same batch as the head.

The batch's shards are used only if the head it brought back **equals** the remembered value.
Otherwise (a first read, or the list changed since) the shards the new head names are read in a
second round trip, after the head, exactly as ``read_many`` reads them; celebrities followed
now but not remembered cost a round trip too. Anything unusual about the list (absent, being
built, a shard missing, corrupt, dirty) goes through ``read_many`` itself, rebuild and all.

**Why shards read in the same batch as the head are as good as shards read after it.** Let R be
the remembered head value, which this process read at time t0, and let the batch read the head
at t_h (finding R) and a shard at t_s. Both come after t0 (the batch is sent after that read
completed), and t_s may come before t_h (keys live on different servers). A head never holds the
same value twice: a committed head names its generation, which is fresh for every claim; within
a generation the head only grows (a rollover appends a shard name, graph/lists/sharded.py);
invalidation, eviction and expiry delete it, and whatever is written next names a new
generation. So a head that held R at t0 and at t_h held R throughout, and at t_s in particular.
Reading the head just before t_s (finding R) and the shard at t_s is an execution of the
sequential reader, and the batch's result is that execution's result. The keys asked for are
the ones that reader would ask for: they are derived from R, and a shard's key (generation and
a name never reused) belongs to R's generation alone. Shards are append-only within a
generation (a compaction rewrites one keeping every token that decides membership), so what a
shard holds at t_s is all that sequential reader would see of it at t_s. Nothing in the write,
rebuild or compaction protocol changes: a reader only chooses when to send its shard GETs.

**The timeline and the celebrity items in the same batch.** Those are separate items, each read
through its own validation (``CappedLayout.fetched``, ``CelebrityPosts``), and no guarantee
relates the instants at which a reader reads them: the sequential reader read the following
list, then the timeline, with writes free to land in between, in either item. Once writes stop,
every read returns the view of the store, whichever order its GETs ran in.

**Shared by a process's threads.** The remembered heads live in a ``ReadMemory`` that the
fetchers of one process may share (``fanout serve`` gives its request threads one, so a user's
next read finds the head whichever thread serves it). The argument above holds unchanged: a
thread puts R only after the read that found it completed (t0), and another thread's batch is
built from R after taking it out, so that batch is sent after t0, which is all the argument uses
of "this process". The memory's lock orders the two.

A fetcher makes plans (graph/timelines/plan.py) and sends nothing itself: the executor of a
plan sends its multi-GETs and runs its blocking steps (a list read the long way, with the
lists' own connections). Its lists' statistics are not locked: one fetcher per thread or task;
only its ``ReadMemory`` may be shared.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from timeline_fanout.graph.lists.capped import CappedLists
from timeline_fanout.graph.lists.sharded import ShardedLists
from timeline_fanout.graph.lists.tokens import frozen
from timeline_fanout.graph.model.keys import ListKind, ListRef
from timeline_fanout.graph.timelines.celebrity_posts import CelebrityPosts
from timeline_fanout.graph.timelines.plan import Plan, blocking, multi_get
from timeline_fanout.memcache.cluster import Item

# Users whose last read is remembered: ~600 bytes each (a head value, names, the next keys).
REMEMBERED_USERS = 1 << 15


class Remembered(NamedTuple):
    head: bytes  # the following list's head as last read (a committed index)
    celebrities: tuple[str, ...]  # celebrities the user followed then
    keys: tuple[bytes, ...]  # the next read's batch: derived from the two above


class ReadMemory:
    """The last read per user, least recently used first out; safe to share between threads
    (every operation holds the lock)."""

    def __init__(self, capacity: int = REMEMBERED_USERS) -> None:
        self._items: OrderedDict[str, Remembered] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def get(self, user: str) -> Remembered | None:
        """A read of ``user`` is a use: a user whose reads are all answered by the page memo
        (which puts nothing here) must not drift out while others are read."""
        with self._lock:
            last = self._items.get(user)
            if last is not None:
                self._items.move_to_end(user)
            return last

    def put(self, user: str, last: Remembered) -> None:
        """An unchanged entry is kept, not replaced: most reads of a warm user find what was
        remembered, and a new object per read would be a long-lived allocation per read, which
        is what sets off the interpreter's full collections (tens of ms here,
        docs/decisions/gc-policy.md)."""
        with self._lock:
            if self._items.get(user) != last:
                self._items[user] = last
            self._items.move_to_end(user)
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)

    def forget(self, user: str) -> None:
        with self._lock:
            self._items.pop(user, None)


class Batch(NamedTuple):
    """A read's first multi-GET, made by its caller: ``found`` for the keys of
    ``batch_keys(user, last)``, ``last`` taken once, before it was sent."""

    last: Remembered | None
    found: dict[bytes, Item]


@dataclass(slots=True)
class Fetched:
    """What one read found: the following list, the timeline's members in item order
    (duplicates kept), the celebrities followed, and the items read (their posts are split
    from these by the caller, as far as it needs)."""

    following: frozenset[str]
    delivered: list[str]
    celebrities: list[str]
    found: dict[bytes, Item]


class TimelineFetch:
    def __init__(
        self,
        follow_lists: ShardedLists,
        timelines: CappedLists,
        celebrity_posts: CelebrityPosts,
        memory: ReadMemory | None = None,
    ) -> None:
        self._lists = follow_lists
        self._timelines = timelines
        self._celebrity_posts = celebrity_posts
        self._memory = memory or ReadMemory()

    def remembered(self, user: str) -> Remembered | None:
        return self._memory.get(user)

    def batch_keys(self, user: str, last: Remembered | None) -> Sequence[bytes]:
        """The keys of a read's first multi-GET: the following list's head, the timeline, the
        celebrity set, the deletion mark (graph/timelines/post_bodies.py), and the shards and
        celebrities of ``last`` (what ``remembered`` said of the user's last read: taken once,
        before the batch is sent)."""
        if last is not None:
            return last.keys
        return [
            self._lists.index_key(ListRef(ListKind.FOLLOWING, user)),
            self._timelines.index_key(ListRef(ListKind.TIMELINE, user)),
            self._celebrity_posts.set_key(user),
            self._timelines.keys.deletions_key(user),
        ]

    def _remember(self, user: str, head: bytes, celebrities: list[str]) -> Remembered:
        """What a read that accepted ``head`` leaves for the next one, its batch's keys
        included (computed once, not on every read)."""
        first = self.batch_keys(user, None)
        shards = self._lists.layout.named_shards(first[0], head)
        keys = (*first, *shards, *self._celebrity_posts.keys(celebrities))
        return Remembered(head, tuple(celebrities), keys)

    def fetching(self, user: str) -> Plan[Fetched]:
        """A read's items (graph/timelines/plan.py): its first multi-GET, then ``settling``."""
        last = self.remembered(user)
        found = yield from multi_get(self.batch_keys(user, last))
        return (yield from self.settling(user, last, found))

    def settling(
        self, user: str, last: Remembered | None, found: dict[bytes, Item]
    ) -> Plan[Fetched]:
        """The rest of a read whose first multi-GET, of ``batch_keys(user, last)``, brought
        ``found``: more round trips only where the batch was not enough (module docstring);
        a list that must be read the long way (rebuilt, waited for) is a blocking step."""
        following_ref = ListRef(ListKind.FOLLOWING, user)
        timeline_ref = ListRef(ListKind.TIMELINE, user)
        list_key = self._lists.index_key(following_ref)
        timeline_key = self._timelines.index_key(timeline_ref)
        head = found.get(list_key)
        list_items = found
        if head is not None and (last is None or head.value != last.head):
            # Not the head remembered: its shards are read now, after it (the plain protocol).
            shards = yield from multi_get(self._lists.layout.named_shards(list_key, head.value))
            list_items = {list_key: head, **shards}
        fetched = self._lists.layout.fetched(list_key, list_items)
        accepted = None if fetched is None or head is None else head.value
        if fetched is None:
            lists = self._lists
            fetched = yield from blocking("a following list", lambda: lists.read(following_ref))
        following = frozen(fetched)

        celebrities = sorted(
            (yield from self._celebrity_posts.celebrity_set(user, found)) & following
        )
        unread = [k for k in self._celebrity_posts.keys(celebrities) if k not in found]
        found.update((yield from multi_get(unread)))
        if accepted is None:  # read the long way: the next read starts afresh
            self._memory.forget(user)
        elif last is not None and (accepted, tuple(celebrities)) == last[:2]:
            self._memory.put(user, last)  # unchanged: only its place in the queue moves
        else:
            self._memory.put(user, self._remember(user, accepted, celebrities))

        delivered = self._timelines.layout.fetched(found.get(timeline_key))
        if delivered is None:
            timelines = self._timelines
            delivered = yield from blocking(
                "a timeline", lambda: list(timelines.read(timeline_ref))
            )
        return Fetched(following, delivered, celebrities, found)
