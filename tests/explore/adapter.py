"""Everything the explorer knows about the project's API, in one module.

The scheduler, the scenarios and the invariants never touch the project directly: they go
through ``World`` (one schedule's cache servers, clock, store file and namespace) and
``Process`` (the objects one consumer process would own). Whatever the graph layer renames or
re-keys is fixed here and only here; the names this relies on are listed in ``PROJECT_API``.
(Written against the graph layer of f58a40d; ported to the fenced redesign: ``|`` keys,
building markers in the head item instead of a ``:rb`` lease, positioned tokens, the applier's
read-back of additions.)

Things that are internals on purpose and would move with another redesign:
- yield points *inside* an edge-store call (``_YieldingConnection`` on ``SqliteEdgeStore._db``):
  a statement outside a transaction is a yield point (``BEGIN IMMEDIATE`` of a write, the
  read-back ``SELECT``s), none inside one (a store transaction is atomic, as it is for real);
- what would make a run time- and entropy-dependent, passed in for reproducibility: the clock
  and random hex generation ids, rollover shard names and the deletion mark's values are made
  from (``Fresh``, given to the lists and post bodies: a fixed clock and a counter), the texts
  known under a mark (``KnownTexts``: a new one in every run), the claim TTL
  (``ListSettings.lease_s``: longer than any schedule, so a claim expires only as an injected
  fault); a reader's wait for someone else's build is the cache's ``wait``, a virtual sleep;
- the cache as each process sees it (``explored_cluster``, a ``MemcacheCluster`` given its
  connections by a factory): its own ``ServerTrust`` on the schedule's
  virtual clock (``World.now``: steps taken and virtual sleeps, never the wall clock), epochs
  from a counter, servers named ``s0``, ``s1``, ... so that keys land on the same server in every
  session whatever its ports, waits (a revocation's lease, a fresh epoch's) made virtual
  sleeps, and pipes (``_CutPipe``, a ``ServerPipe``) that fail while the explorer has cut the
  process off a server;
- the ring every process reads (``World.ring``, a ``RingSource`` held in memory, swapped by
  the product's ``change_ring`` run as an actor): each process re-reads it once per
  ``Knobs.ring_lease_s`` of virtual time, and the operator's holds are spent as steps;
- reading the trace back (``describe``, ``suspect``), which knows the key and token layout.
"""

from __future__ import annotations

import functools
import math
import re
import socket
import sqlite3
import zlib
from collections.abc import Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass
from itertools import compress, pairwise
from pathlib import Path
from typing import Any, cast

from tests.explore.model import POST_KINDS, Entry, Event, ListId
from tests.explore.scheduler import Proxy, Scheduler, Step
from tests.held_ring import HeldRing
from timeline_fanout.consumers.failures import classify
from timeline_fanout.consumers.fanout_apply import FanoutApplier
from timeline_fanout.consumers.graph_apply import GraphApplier
from timeline_fanout.consumers.positions import OFFSET_BITS, Origin, Positioned, position
from timeline_fanout.graph import lists as graph_lists
from timeline_fanout.graph.failures import Failure as FailureClass
from timeline_fanout.graph.lists.capped import CappedLayout
from timeline_fanout.graph.lists.fencing import FILLING
from timeline_fanout.graph.lists.sharded import ShardedLayout
from timeline_fanout.graph.lists.token_lists import ListSettings, TokenLists
from timeline_fanout.graph.model.edges import (
    EdgeChange,
    EdgeState,
    EdgeStore,
    RemovedUser,
    Snapshot,
    StoredBodies,
)
from timeline_fanout.graph.model.fresh import Fresh
from timeline_fanout.graph.model.keys import SEP, KeySpace, ListKind, ListRef
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore
from timeline_fanout.graph.timelines import post_bodies
from timeline_fanout.graph.timelines.author_pages import AuthorPages
from timeline_fanout.graph.timelines.celebrity_posts import CelebrityPosts
from timeline_fanout.graph.timelines.known_texts import KnownTexts
from timeline_fanout.graph.timelines.post_bodies import PostBodies
from timeline_fanout.graph.timelines.reader import TimelineEntry, TimelineReader, TimelineSource
from timeline_fanout.memcache.cluster import MemcacheCluster, Outcome
from timeline_fanout.memcache.pools import ServerPipe
from timeline_fanout.memcache.ring import MOVED, Placement, RingRecord, RingView
from timeline_fanout.memcache.trust import ServerTrust, TrustSettings
from timeline_fanout.memcache.wire import Item
from timeline_fanout.producers.publisher import DeliveryReport
from timeline_fanout.schemas import AnyEvent, Follow, Post, PostDeleted, Unfollow, UserRemoved

__all__ = [
    "PROJECT_API",
    "Knobs",
    "Process",
    "Stall",
    "World",
    "footprint",
    "is_read",
    "is_transient",
    "is_write",
]

PROJECT_API = (
    "MemcacheCluster(servers) and its batch methods (Outcome results, Item from gets_many)",
    "SqliteEdgeStore(path), EdgeStore.all_members/snapshot/apply/positions/remove_user",
    "TokenLists(ShardedLayout or CappedLayout, cache, source, ListSettings(lease_s), rng=rng, "
    "fresh=Fresh(clock, token_hex)): read_many, invalidate, rebuild_many; cache.wait (a reader "
    "waiting for another client's build)",
    "timeline_fanout.graph.lists.fencing BUILDING and generations (deadline, then 8 hex digits); "
    "graph.model.keys.SEP",
    "PostBodies(cache, store, keys, heal_s, KnownTexts, Fresh); TimelineReader(..., known)",
    "GraphApplier(store, lists).apply(batch); .record(batch) for a crash after the store step",
    "FanoutApplier(..., CelebrityPosts, PostBodies).apply(batch); TimelineSource.snapshot",
    "TimelineReader.read/page/view; TokenLists.cached_many; EdgeStore.delete_posts/post_bodies",
    "Positioned(event, position(ts, offset), Origin(...), raw)",
    "MemcacheCluster(servers, trust=ServerTrust(names, TrustSettings, clock, new_epoch, "
    "ring=RingView(record, source, lease_s, clock, families))); its wait/settle/available/"
    "checkpoint/missed/flush_all, and its connect/sleep/brings_back; memcache.pools.ServerPipe",
    "memcache.ring: RingRecord.of/servers/rings/moving, Placement(record, families)"
    ".owners/nodes, MOVED; "
    "memcache.ring_change.change_ring(source, configured, servers, hold, sleep=...)",
    "timeline_fanout.consumers.failures.classify: which errors a consumer retries",
)

KINDS = {"followers": ListKind.FOLLOWERS, "following": ListKind.FOLLOWING}
TIMELINE = "timeline"
# Far longer than any schedule: a claim disappears only when the explorer evicts it, expires it
# or "restarts" a server, never because the wall clock moved (that would not replay).
LEASE_S = 3600
# The wall clock as the lists see it (``Fresh.clock``): generations carry an absolute deadline
# (unix seconds, 8 hex digits), this plus a list's lifetime (about an hour): far ahead (2037,
# below 2**31: memcached reads expiries as signed 32 bits), so no run depends on the clock.
CLOCK_S = 0x7E000000
# Virtual seconds a step takes (``World.now``): leases run out and retry intervals pass as the
# schedule moves on, the same way in every replay. With the product's bounds (a 2 s retry) a
# server marked down is probed again 100 steps later.
STEP_S = 0.02
# How long a request to a server that is not cut off may wait for its reply, in wall-clock
# seconds: the real servers always answer, and the failover timeout a schedule draws
# (``Knobs.timeout_s``) is virtual, so this only has to outlast a busy machine.
PIPE_TIMEOUT_S = 5.0
# The servers in the ring at first (``s0``-``s2``); any further one is a spare that a ring
# change adds.
FIRST_RING = 3
ADMIN = "explorer"  # the owner of the world's own cluster (faults): never cut off
CUT_MODES = ("refused", "unanswered", "late")
HOLD_CHUNK = 5  # steps a waiting actor lets the others take before it reads the clock again
# Store calls that write: the exchange after one is a stall's ``after-store`` point.
STORE_WRITES = frozenset({"apply", "remove_user", "store_posts", "delete_posts"})
SELF = "self"  # a stall's cut of the stalled process itself
OTHERS = "others"  # a stall's cut of every process but the stalled one
WRITE_POINTS = ("after-store", "invalidation", "delete")  # a writer's stall points


@dataclass(frozen=True, slots=True)
class Stall:
    """One process stopped mid-exchange (its requests placed, under the lease and epochs it
    began with), at the ``nth`` request after the previous stall that ``point`` names:

    - ``after-store``: the first request to a cache server after an edge-store write (the
      batch is in the store, none of its cache writes made);
    - ``invalidation``: a DELETE of a home timeline's head, which a graph batch makes for
      every follower whose followees changed; no later round retries it;
    - ``delete``: any DELETE (an invalidation, a dropped list, a claim broken);
    - ``read``: a read of items (a reader's list heads and shards, a timeline).

    ``phase``: before the request is sent, or after it was sent and before its reply is read.
    ``seconds``: how long the process is not scheduled (virtual; a hold is about 5 s).
    ``cut``: a cut of the server the request goes to, made as the process stops: of the
    process itself (``SELF``: its request fails, refused, unanswered or run late), of every
    process (``*``: the server down or hung), of every other process (``OTHERS``: each that
    writes there meanwhile revokes the server's epoch and commits, and the stopped one's
    request then reaches the server under the epoch they revoked), or of another process
    (which revokes the server's epoch while this one is stopped); it heals ``cut_steps`` steps
    later."""

    point: str
    nth: int
    phase: str
    seconds: float
    cut: str | None = None
    mode: str = "refused"
    cut_steps: int = 0

    def meets(self, request: bytes, after_store: bool) -> bool:
        if self.point == "after-store":
            return after_store
        if self.point == "read":
            return request.startswith(b"mg ")
        deletes = [line for line in request.split(b"\r\n") if line.startswith(b"delete ")]
        if self.point == "delete":
            return bool(deletes)
        return any(line.split(SEP)[1:2] == [KIND_CODES[TIMELINE].encode()] for line in deletes)

    def __str__(self) -> str:
        cut = f", cut {self.cut} ({self.mode}) {self.cut_steps} steps" if self.cut else ""
        return f"{self.point}#{self.nth} {self.phase} {self.seconds:.1f}s{cut}"


def is_transient(exc: BaseException) -> bool:
    """An error the consume loop retries the batch for (a busy store, a cache write that did
    not settle); anything else ends the writer and is reported."""
    return classify(exc) is FailureClass.TRANSIENT


def is_marker(key: bytes, value: bytes) -> bool:
    """A list head holding a building marker: a rebuild's claim (``"{gen}~ +j "`` for a sharded
    list's index, ``"~{gen} ..."`` for a timeline)."""
    if key.count(SEP) != 2:
        return False
    if key.split(SEP)[1] == ListKind.TIMELINE.value.encode():
        return value.startswith(graph_lists.fencing.BUILDING)
    first = value.split(b" ", 1)[0]
    return first.endswith(graph_lists.fencing.BUILDING)


@dataclass(frozen=True, slots=True)
class Knobs:
    """The product's settings for one schedule (cli/settings.py names them): small shards so
    rollovers and compactions happen, and the failover bounds, whose defaults are where the
    holds and leases of a hand-written test usually sit.

    ``ring_lease_s`` (``FANOUT_RING_LEASE_S``), ``retry_s`` and ``timeout_s``
    (``FANOUT_CACHE_RETRY_S``, ``FANOUT_CACHE_TIMEOUT_S``) are in virtual seconds; the timeout
    sizes the holds (``ring_change.hold_s``) and the wait of ``settle``, while a request to a
    server that answers still waits on its socket for ``PIPE_TIMEOUT_S`` of wall clock.
    ``celebrity_cache_s`` (``FANOUT_CELEBRITY_CACHE_S``) is a real memcached expiry: only values
    no schedule outlives are drawn, or a seed would not replay."""

    shard_bytes: int = 64
    dirty_min: int = 2
    dirty_ratio: float = 0.5
    compact_write_prob: float = 0.0
    cap: int = 800
    ring_lease_s: float = 2.0
    retry_s: float = 2.0
    timeout_s: float = 1.0
    celebrity_cache_s: int = LEASE_S

    @property
    def bounds(self) -> TrustSettings:
        return TrustSettings(timeout_s=self.timeout_s, retry_s=self.retry_s)


class _NoChunkTasks:
    """The fan-out's chunk-task publisher: authors here are far below the chunk size, so a
    publish would be a bug in the scenario; flush has nothing to confirm."""

    def publish(self, event: object) -> None:
        raise AssertionError(f"no chunk tasks expected, got {event!r}")

    def flush(self) -> DeliveryReport:
        return DeliveryReport()


class _YieldingConnection:
    """A sqlite3 connection whose statements are yield points when no transaction is open.

    Why: ``EdgeStore.apply`` reads the removal marks and writes the edges in two steps; as one
    atomic call the explorer could never interleave a removal between them. Never inside a
    transaction: a paused actor holding SQLite's write lock would block the actor that runs
    next for the whole busy timeout (and a transaction is atomic anyway)."""

    def __init__(self, conn: sqlite3.Connection, scheduler: Scheduler, store: _Tracked) -> None:
        self._conn = conn
        self._scheduler = scheduler
        self._store = store

    def _pause(self, sql: str) -> None:
        if not self._conn.in_transaction:
            table = re.search(r"\b(edges|users|posts|deleted_posts|celebrities)\b", sql)
            call = f"sql.{sql.split()[0].lower()}"
            self._scheduler.pause(call, (table[0] if table else "", self._store.users))

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self._pause(sql)
        return self._conn.execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self._pause(sql)
        return self._conn.executemany(sql, *args)

    def __enter__(self) -> sqlite3.Connection:
        return self._conn.__enter__()

    def __exit__(self, *exc: Any) -> bool | None:
        return self._conn.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _Tracked:
    """The edge store, remembering which users the call in progress is about, so that the
    SQL yield points inside it have a footprint too (see ``footprint``)."""

    def __init__(self, store: SqliteEdgeStore) -> None:
        self._store = store
        self.users: frozenset[str] = frozenset()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if name.startswith("_") or not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            self.users = _store_users(name, args)
            try:
                return value(*args, **kwargs)
            finally:
                self.users = frozenset()

        return call


def _store_users(method: str, args: tuple[Any, ...]) -> frozenset[str]:
    if not args:
        return frozenset()
    first = args[0]
    if method == "apply":
        return frozenset(u for c in first for u in c.edge)
    if method == "positions":
        return frozenset(u for edge in first for u in edge)
    if method in ("remove_user", "followers", "following", "counts"):
        return frozenset([first])
    if method in ("all_members", "snapshot"):
        return frozenset([first.user])
    if method == "recent_posts":
        return frozenset(first)
    if method in ("store_posts", "delete_posts", "post_bodies"):
        return frozenset(p.author for p in first)
    return frozenset()


def footprint(call: str, args: tuple[Any, ...]) -> frozenset[str] | None:
    """The users a call is about: a store call's edges, lists or posts' authors, the owners of
    the cache keys (``{ns}|{kind}|{user}...``; a post's body item ``{ns}|pb|{author}|{post_id}``
    is its author's). None for faults, which may hit anything. The scheduler lets
    a writer whose footprint meets a reader's go next: a conflict, not just any write."""
    if call.startswith("fault."):
        return None
    if call.startswith("sql."):
        return frozenset(args[1]) if len(args) > 1 else frozenset()
    if call.startswith("store."):
        return _store_users(call.split(".", 1)[1], args)
    if call.startswith("cache.") and args:
        first = args[0]
        if call == "cache.append_to_each":
            keys = [k for _, ks in first for k in ks]
        elif isinstance(first, bytes):
            keys = [first]
        else:
            keys = list(first)
        return frozenset(k.split(SEP)[2].decode() for k in keys if k.count(SEP) >= 2)
    return frozenset()


READS = frozenset(
    {
        "store.all_members",
        "store.snapshot",
        "store.positions",
        "store.recent_posts",
        "store.post_bodies",
        "store.followers",
        "store.following",
        "sql.select",
        "cache.get_many",
        "cache.gets_many",
        "cache.exists_many",
    }
)


def is_read(call: str) -> bool:
    """Calls that read shared state (the store, an index, a lease): the moments after which
    a preemption is most likely to expose a read-then-act race."""
    return call in READS


WRITES = frozenset(
    {
        "store.apply",
        "store.remove_user",
        "store.store_posts",
        "store.delete_posts",
        "sql.begin",
        "cache.add_many",
        "cache.append_many",
        "cache.append_to_each",
        "cache.set_many",
        "cache.cas",
        "cache.cas_many",
        "cache.incr_many",
        "cache.decr_many",
        "cache.delete_many",
        "cache.delete_if_unchanged",
        "cache.flush_all",
        "fault.evict",
        "fault.restart",
        "fault.lease-expiry",
        "fault.lose-bodies",
        "fault.cut",
        "fault.heal",
        "fault.server-restart",
        "fault.ring",
    }
)


def is_write(call: str) -> bool:
    """Calls that change shared state (a store transaction, a cache write, a fault)."""
    return call in WRITES


def _no_keys(method: str, args: tuple[Any, ...]) -> bool:
    """A batch call with an empty batch (the list code makes many: no leases to take, no
    shards to rewrite), ``checkpoint`` (a counter of this process's) or ``wait`` (a virtual
    sleep, itself the yield point): it sends nothing to memcached, so it is not a yield point."""
    if method in ("checkpoint", "wait"):
        return True
    return method != "flush_all" and bool(args) and isinstance(args[0], Sized) and not args[0]


def _canonical(method: str, args: tuple[Any, ...], result: Any) -> Any:
    """A batch call's result in key order. The cluster answers server by server, so its order
    depends on where the ring puts each key (the session's free ports), and the keys asked for
    may come in a set's order (which varies between processes); the list code iterates these
    results (which lease it builds first, which list it retries first), so without this a seed
    would replay differently in another session."""
    if isinstance(result, dict):
        return dict(sorted(result.items()))
    if method == "append_to_each" and isinstance(result, list):
        return sorted(result, key=lambda refused: refused[:2])
    return result


def _entries(entries: Iterable[TimelineEntry]) -> list[Entry]:
    return [(e.ts, e.author, e.post_id) for e in entries]


def _ref(list_id: ListId) -> ListRef:
    kind, user = list_id
    return ListRef(ListKind.TIMELINE if kind == TIMELINE else KINDS[kind], user)


def _event(e: Event) -> AnyEvent:
    if e.kind == "follow":
        return Follow(type="follow", follower=e.user, followee=e.other, ts=e.ts)
    if e.kind == "unfollow":
        return Unfollow(type="unfollow", follower=e.user, followee=e.other, ts=e.ts)
    if e.kind == "removed":
        return UserRemoved(type="user_removed", user=e.user, ts=e.ts)
    if e.kind == "deleted":
        return PostDeleted(type="post_deleted", author=e.user, post_id=e.other, ts=e.ts)
    return Post(type="post", author=e.user, post_id=e.other, ts=e.ts)


def positioned(e: Event) -> Positioned:
    topic = "x.posts" if e.kind in POST_KINDS else "x.graph"
    key = (e.other if e.kind in ("follow", "unfollow") else e.user).encode()
    return Positioned(
        _event(e), position(e.ts, e.offset), Origin(topic, e.partition, e.offset, key), b""
    )


class Process:
    """What one consumer (or reader) process owns: its own store connection, list objects,
    appliers and cache client (its own view of which servers are down and under which epoch),
    proxied to the scheduler. Built inside the actor's thread, because a sqlite3 connection
    belongs to the thread that opened it."""

    def __init__(self, world: World, seed: int, scheduled: bool, owner: str = "") -> None:
        import random

        rng = random.Random(seed)
        self._rng = rng
        raw = SqliteEdgeStore(world.db_path)
        self._raw = raw
        scheduler = world.scheduler
        # Its own view of the servers (down, leases), as a separate process has: an actor is
        # named for the cuts (``World.cut``) by its actor's name.
        self.owner = (scheduler.current() if scheduler else None) or owner or "setup"
        self.cluster = explored_cluster(world, self.owner)
        cache: MemcacheCluster = self.cluster
        if scheduler is not None:  # setup and checks: not yield points, same canonical order
            cache = cast(
                MemcacheCluster,
                Proxy(self.cluster, scheduler, "cache", world._seen, _canonical, _no_keys),
            )
        store: EdgeStore = raw
        if scheduled and scheduler is not None:
            tracked = _Tracked(raw)
            raw._db = cast(sqlite3.Connection, _YieldingConnection(raw._db, scheduler, tracked))
            called = functools.partial(world.store_called, self.owner)
            store = cast(EdgeStore, Proxy(tracked, scheduler, "store", called))
        self.store = store
        knobs = world.knobs
        settings = ListSettings(
            shard_bytes=knobs.shard_bytes,
            dirty_ratio=knobs.dirty_ratio,
            dirty_min=knobs.dirty_min,
            compact_write_prob=knobs.compact_write_prob,
            namespace=world.namespace,
            lease_s=LEASE_S,
        )
        capped = ListSettings(
            shard_bytes=knobs.shard_bytes,
            dirty_ratio=knobs.dirty_ratio,
            dirty_min=knobs.dirty_min,
            # A fan-out samples timelines to compact from a follower *set*'s iteration order,
            # which depends on the process's string hashing: no sampling, or no replay.
            compact_write_prob=0.0,
            namespace=world.namespace,
            max_members=knobs.cap,
            lease_s=LEASE_S,
        )
        self.lists = TokenLists(ShardedLayout, cache, store, settings, rng=rng, fresh=world.fresh)
        self.source = TimelineSource(store, knobs.cap)
        self.timelines = TokenLists(
            CappedLayout, cache, self.source, capped, rng=rng, fresh=world.fresh
        )
        self.graph = GraphApplier(store, self.lists)
        # Cached celebrity answers live longer than any schedule (``Knobs.celebrity_cache_s``),
        # like claims: they must not expire by the wall clock, or a seed would not replay.
        celebrities = CelebrityPosts(
            cache, store, self.timelines.keys, knobs.cap, knobs.celebrity_cache_s
        )
        bodies = PostBodies(cache, store, self.timelines.keys, LEASE_S, world.known, world.fresh)
        self.fanout = FanoutApplier(
            store,
            self.lists,
            self.timelines,
            cast(Any, _NoChunkTasks()),
            10**6,
            10**9,
            celebrities,
            bodies,
            AuthorPages(cache, store, self.timelines.keys, bodies, LEASE_S),
        )
        self.reader = TimelineReader(
            store, self.lists, self.timelines, knobs.cap, celebrities, known=world.known
        )

    def apply(self, events: Sequence[Event]) -> None:
        """One batch, as the consumer of its topic applies it."""
        posts = [positioned(e) for e in events if e.kind in POST_KINDS]
        edges = [positioned(e) for e in events if e.kind not in POST_KINDS]
        if edges:
            self.graph.apply(edges)
        if posts:
            self.fanout.apply(posts)

    def apply_store_only(self, events: Sequence[Event]) -> None:
        """A consumer that crashed after the edge-store step of a graph batch, before its
        lists: the batch is not committed and will be delivered again."""
        self.graph.record([positioned(e) for e in events if e.kind not in POST_KINDS])

    def read(self, ids: Sequence[ListId]) -> dict[ListId, frozenset[str]]:
        """Readers: follower/following lists in one ``read_many``; a timeline through the
        real read path (following list, timeline, celebrity merge, post bodies), as a first
        page of 50, or pages of one or two walked down (deep pages read the bodies above
        their cursor). Returns what the follower/following lists read."""
        graph_ids = [i for i in ids if i[0] != TIMELINE]
        found = self.lists.read_many([_ref(i) for i in graph_ids]) if graph_ids else {}
        for kind, user in ids:
            if kind == TIMELINE:
                limit = self._rng.choice([1, 2, 50])
                self.pages(user, limit, pages=1 if limit == 50 else self._rng.randint(1, 3))
        return {i: found[_ref(i)] for i in graph_ids}

    def pages(self, user: str, limit: int, pages: int | None = None) -> list[Entry]:
        """A home timeline walked ``pages`` pages of ``limit`` down (all of them: None), each
        from the previous page's cursor; their entries in order."""
        entries: list[Entry] = []
        cursor: str | None = None
        while pages is None or pages > 0:
            page = self.reader.page(user, limit, cursor)
            entries += _entries(page.entries)
            cursor = page.next
            if cursor is None:
                break
            pages = None if pages is None else pages - 1
        return entries

    def invalidate(self, ids: Sequence[ListId]) -> None:
        self._split(ids, lambda lists, refs: lists.invalidate(refs))

    def rebuild(self, ids: Sequence[ListId]) -> None:
        """``fanout rebuild-cache``: drop and rebuild now (through the fence: a rebuild that
        loses its claim leaves the list to its next reader)."""

        def action(lists: TokenLists, refs: list[ListRef]) -> None:
            lists.invalidate(refs)
            lists.rebuild_many(refs)

        self._split(ids, action)

    def _split(self, ids: Sequence[ListId], action: Any) -> None:
        refs = [_ref(i) for i in ids]
        graph_refs = [r for r in refs if r.kind is not ListKind.TIMELINE]
        timeline_refs = [r for r in refs if r.kind is ListKind.TIMELINE]
        if graph_refs:
            action(self.lists, graph_refs)
        if timeline_refs:
            action(self.timelines, timeline_refs)

    def close(self) -> None:
        self._raw.close()
        self.cluster.close()


class _CutPipe(ServerPipe):
    """One process's connection to one server, which fails while the explorer has cut that
    process off the server (``World.cut``): ``refused``, nothing reaches the server (a refused
    connection, a partition); ``unanswered``, the server runs the request and the process never
    hears back (a partition after the send); ``late``, the request waits and the server runs it
    when the cut heals (a hung server resumed, running what waited in its socket). The
    product's own code then finds the server down, goes around it and revokes its epoch if a
    write was lost, exactly as for a real failure, but at a step the seed chose, with no
    timeout waited."""

    def __init__(self, alias: str, address: tuple[str, int], world: World, owner: str) -> None:
        super().__init__(*address, PIPE_TIMEOUT_S)
        self.name = alias
        self._world = world
        self._owner = owner
        self._sent = b""  # the last request sent: what the reply read next answers

    def send(self, payload: bytes) -> None:
        self._world.reached(self._owner, self.name, "send", payload)
        self._world.asks(self._owner, self.name)
        self._sent = payload
        mode = self._world.cut_mode(self._owner, self.name)
        if mode == "refused":
            self._fail("refused (cut off by the explorer)")
        if mode == "late":
            self._world.held.setdefault(self.name, []).append(payload)
            return
        super().send(payload)

    def receive(self, lines: int) -> bytes:
        self._answer()
        return super().receive(lines)

    def receive_values(self, count: int) -> list[Item | None]:
        self._answer()
        return super().receive_values(count)

    def receive_quiet(self) -> bytes:
        self._answer()
        return super().receive_quiet()

    def _answer(self) -> None:
        """Before a reply is read: a stall due here (``World.reached``), then the cut."""
        self._world.reached(self._owner, self.name, "receive", self._sent)
        if self._world.cut_mode(self._owner, self.name) is not None:
            self._fail("no answer (cut off by the explorer)")


def explored_cluster(world: World, owner: str, ring: RingView | None = None) -> MemcacheCluster:
    """The cache as one process sees it: its own ``ServerTrust`` (its own servers down, its
    own leases) on the schedule's virtual clock, epochs from the world's counter, waits made
    virtual sleeps (a yield point: others run while a revocation stands), and the servers
    named ``s0``, ``s1``, ... by their order, so that the ring places every key on the same
    server in every session (real names carry the session's free ports); its connections are
    ``_CutPipe``s. Its ring is the world's record, read again once per ``Knobs.ring_lease_s``
    (``ring``: a fixed one instead). The faults' own process brings no server back: its swaps
    of the record would be steps of the schedule taken inside another step (a fault's)."""
    aliases = list(world.servers)
    lease_s = world.knobs.ring_lease_s
    trust = ServerTrust(
        aliases,
        world.knobs.bounds,
        clock=world.now,
        new_epoch=world.new_epoch,
        ring=ring
        or RingView(
            world.ring.record, world.ring, lease_s, clock=world.now, families=KeySpace.families
        ),
    )
    named = dict(zip(aliases, world.addresses, strict=True))
    return MemcacheCluster(
        world.addresses,
        trust=trust,
        connect=lambda alias: _CutPipe(alias, named[alias], world, owner),
        sleep=world.sleep,
        brings_back=owner != ADMIN,
    )


class World:
    """One schedule's shared things: the real memcached servers (flushed first: a seed must
    find the same empty cache every time it runs) and which processes are cut off which of
    them, the virtual clock every process's ``ServerTrust`` reads, the SQLite file, the
    namespace, and the keys seen written, for evictions that need no knowledge of the key
    layout. The faults go through a process of their own (``admin``), never cut off."""

    def __init__(
        self,
        cluster: MemcacheCluster,
        db_path: Path,
        namespace: str,
        knobs: Knobs,
    ) -> None:
        self.db_path = db_path
        self.namespace = namespace
        self.knobs = knobs
        self.scheduler: Scheduler | None = None
        self.present: dict[bytes, None] = {}  # keys believed present, least recent first
        self.building: set[bytes] = set()  # heads last seen written with a building marker
        self._fresh_values = 0
        # The clock and random hex of every process's lists and post bodies, and the texts
        # known under a deletion mark, shared by them as by a process's threads: new each run.
        self.fresh = Fresh(clock=lambda: CLOCK_S, token_hex=self._hex)
        self.known = KnownTexts()
        self.addresses = [
            (host, int(port)) for host, port in (s.rsplit(":", 1) for s in sorted(cluster.servers))
        ]
        self.servers = [f"s{i}" for i in range(len(self.addresses))]
        # (process, "*" or "!{process}", server): how it is cut (see ``cut``)
        self.cuts: dict[tuple[str, str], str] = {}
        self.cut_ends: dict[tuple[str, str], int] = {}  # cuts a stall made: the step they end
        self.stalls: dict[str, list[Stall]] = {}  # per process, the stalls still to come
        self._passed: dict[str, int] = {}  # per process, the points of its next stall passed
        self._stored: set[str] = set()  # processes whose last store call wrote, no cache since
        # Per process watched (``watch``): the step it first asked each server, or the store.
        self._consulted: dict[str, dict[str, int]] = {}
        self.held: dict[str, list[bytes]] = {}  # per server, requests it runs late (in order)
        self.ring = _SwappedRing(self)  # the record every process reads
        self._time = 0.0  # virtual seconds slept outside a schedule (see ``now``)
        self._epochs = 0
        self.admin = explored_cluster(self, ADMIN)  # the faults' own process
        self.admin.flush_all(self.servers)  # the ring's later servers too

    # -- wiring -----------------------------------------------------------------------------------

    def _hex(self, nbytes: int) -> str:
        """``Fresh.token_hex``: a counter, so generations, shard names and mark values are
        fresh within the run (memcached is flushed before it), readable in traces (a
        generation is ``g{n}``) and the same in every replay."""
        self._fresh_values += 1
        return f"{self._fresh_values:0{2 * nbytes}x}"

    def process(self, seed: int, scheduled: bool = True, owner: str = "") -> Process:
        return Process(self, seed, scheduled, owner)

    def close(self) -> None:
        self.admin.close()

    # -- time, epochs and cuts (memcache/trust.py) ------------------------------------------------

    def now(self) -> float:
        """Every process's clock: virtual seconds, ``STEP_S`` per step taken plus every
        virtual sleep (``Scheduler.sleep``), so a lease runs out, a revocation stands and a
        retry interval passes after the same steps in every replay."""
        sched = self.scheduler
        if sched is None:
            return self._time
        return self._time + sched.clock + STEP_S * len(sched.steps)

    def sleep(self, seconds: float) -> None:
        """A process waiting (a revocation's lease): a virtual sleep, a yield point in an
        actor."""
        if self.scheduler is None:
            self._time += seconds
        else:
            self.scheduler.sleep(seconds)

    def new_epoch(self) -> str:
        """``ServerTrust.new_epoch``: unique within the schedule (a counter), the same in
        every replay, and in the same 8 characters as the product's random ones."""
        self._epochs += 1
        return f"e{self._epochs:07x}"

    def cut(self, target: str, server: str, mode: str, until: int | None = None) -> None:
        """Cut process ``target`` (an actor's name; ``*``: every actor, the server down for
        everyone; ``!{name}``: every actor but that one) off ``server``; ``mode`` is one of
        ``CUT_MODES`` (see ``_CutPipe``). The server itself keeps running with its items: it
        comes back stale. ``until``: the step at which the cut heals by itself (at the first
        request that meets it after that: a stall's cut, made by no actor of its own);
        otherwise ``heal`` ends it."""
        self.cuts[(target, server)] = mode
        if until is None:
            self.cut_ends.pop((target, server), None)
        else:
            self.cut_ends[(target, server)] = until

    def heal(self, target: str, server: str) -> int:
        """The cut ends; each process finds out at its next probe, when its own retry interval
        has passed on the virtual clock. A ``late`` cut's requests run now, in the order they
        were sent, each under the epoch it was sent with; returns how many there were."""
        self.cuts.pop((target, server), None)
        self.cut_ends.pop((target, server), None)
        payloads = self.held.pop(server, [])
        if payloads:  # then a no-op: its answer says every request before it has run
            address = self.addresses[self.servers.index(server)]
            with socket.create_connection(address, timeout=10) as sock:
                sock.sendall(b"".join([*payloads, b"mn\r\n"]))
                replies = b""
                while not replies.endswith(b"MN\r\n"):
                    chunk = sock.recv(1 << 16)
                    if not chunk:
                        break
                    replies += chunk
        return len(payloads)

    def _owners(self, key: bytes) -> set[str]:
        """The servers ``key`` is placed on by any version the record holds: where a copy of
        it may be (``server_for`` refuses a key while it moves)."""
        placements = [
            Placement(RingRecord.of(ring), KeySpace.families) for ring in self.ring.record.rings
        ]
        return {p.nodes[o] for p in placements for o in p.owners([key]) if o != MOVED}

    def _delete(self, keys: Sequence[bytes]) -> list[bytes]:
        """Deletes the keys whose copy in use is on a server now (a key moving between servers
        has none), as memcached losing an item would; returns them."""
        usable = list(compress(keys, self.admin.available(keys)))
        self.admin.delete_many(usable)
        self._forget(usable)
        return usable

    def cut_mode(self, owner: str, server: str) -> str | None:
        if owner == ADMIN:
            return None
        sched = self.scheduler
        steps = len(sched.steps) if sched is not None else 0
        for cut, end in list(self.cut_ends.items()):
            if cut[1] == server and steps >= end:
                late = self.heal(*cut)
                if sched is not None:
                    sched.note("fault.heal", (*cut, late))
        mode = self.cuts.get((owner, server)) or self.cuts.get(("*", server))
        return mode or next(
            (
                m
                for (t, s), m in self.cuts.items()
                if s == server and t.startswith("!") and t[1:] != owner
            ),
            None,
        )

    # -- stalls: a process not scheduled for a while, mid-batch ------------------------------

    def store_called(self, owner: str, method: str, args: tuple[Any, ...], result: Any) -> None:
        """Process ``owner``'s store call returned: after a write, its next request to a cache
        server is the ``after-store`` point of a stall."""
        if method in STORE_WRITES:
            self._stored.add(owner)
        watched, sched = self._consulted.get(owner), self.scheduler
        if watched is not None and sched is not None:  # the store answered from the call's step
            call = f"store.{method}"
            mine = (s.index for s in reversed(sched.steps) if (s.actor, s.call) == (owner, call))
            watched.setdefault("store", next(mine, len(sched.steps)))

    def watch(self, owner: str) -> None:
        """From now on note when process ``owner`` first asks each server, and the store."""
        self._consulted[owner] = {}

    def asks(self, owner: str, server: str) -> None:
        """Process ``owner`` sends a request to ``server`` now (which runs it now, unless
        cut)."""
        watched, sched = self._consulted.get(owner), self.scheduler
        if watched is not None and sched is not None:
            watched.setdefault(server, len(sched.steps))

    def consulted(self, owner: str) -> dict[str, int]:
        """What process ``owner`` asked since ``watch``: the first step per server, and
        ``store``'s; the watch ends."""
        return self._consulted.pop(owner, {})

    def places(self, list_id: ListId) -> set[str]:
        """Every server a version of the ring put the list's items on (a list moves whole)."""
        kind, user = list_id
        return self._owners(f"{self.namespace}|{KIND_CODES[kind]}|{user}".encode())

    def reached(self, owner: str, server: str, phase: str, request: bytes) -> None:
        """Process ``owner`` is about to send ``request`` to ``server`` (``phase`` ``send``) or
        to read its reply (``receive``), inside an exchange, under the lease and epochs the
        exchange was placed with. If its next stall is due here, the stall strikes: its cut
        first (of this server), then the process stops while the others run for the stall's
        virtual seconds; then the request goes on as placed, and the exchange's reply is
        checked against the record as the product checks it."""
        after_store = owner in self._stored
        if phase == "send":
            self._stored.discard(owner)
        sched = self.scheduler
        stalls = self.stalls.get(owner)
        if sched is None or not stalls or sched.current() != owner:
            return
        stall = stalls[0]
        if stall.phase != phase or not stall.meets(request, after_store):
            return
        passed = self._passed.get(owner, 0)
        if passed < stall.nth:
            self._passed[owner] = passed + 1
            return
        stalls.pop(0)
        self._passed[owner] = 0
        if stall.cut is not None:
            target = {SELF: owner, OTHERS: f"!{owner}"}.get(stall.cut, stall.cut)
            step = sched.pause("fault.cut", (target, server, stall.mode))
            self.cut(target, server, stall.mode, until=len(sched.steps) + stall.cut_steps)
            if step is not None:
                step.done = True
        if stall.seconds:
            step = sched.pause("fault.stall", (owner, server, phase, stall.point, stall.seconds))
            if step is not None:
                step.done = True
            self.pass_time(stall.seconds)

    def pass_time(self, seconds: float) -> None:
        """The calling actor does nothing until ``seconds`` have passed on the virtual clock:
        steps the others take, and their sleeps (a writer's backoff, a hold); slept at once
        when nobody else runs. What an operator's hold is, and a process stopped (a GC pause,
        a SIGSTOP, a VM descheduled) while the others go on."""
        sched = self.scheduler
        if sched is None:
            self.sleep(seconds)
            return
        end = self.now() + seconds
        while (left := end - self.now()) > 0:
            chunk = min(HOLD_CHUNK, math.ceil(left / STEP_S))
            before = self.now()
            sched.idle_until(len(sched.steps) + chunk)
            if self.now() - before < chunk * STEP_S:  # nobody else ran
                self.sleep(max(0.0, end - self.now()))

    def server_of(self, which: int | ListId) -> str:
        """A server by index, or the server holding a list's head (the key read first)."""
        if isinstance(which, int):
            return self.servers[which % len(self.servers)]
        kind, user = which
        head = f"{self.namespace}|{KIND_CODES[kind]}|{user}".encode()
        return min(self._owners(head) & set(self.ring.record.servers))

    def restart_server(self, server: str) -> list[bytes]:
        """``server`` restarted empty (a flush of that server alone): its items are lost. The
        keys lost are those the (session-independent) ring puts there."""
        lost = [k for k in self.present if server in self._owners(k)]
        self.admin.flush_all([server])
        self._forget(lost)
        return lost

    # -- cache faults -----------------------------------------------------------------------------

    def _seen(self, method: str, args: tuple[Any, ...], result: Any) -> None:
        """Track which keys exist (and which heads hold a marker) from the calls that went
        through the proxy."""
        touched: list[bytes] = []
        gone: list[bytes] = []
        if method in ("add_many", "append_many", "set_many"):
            touched = [k for k, outcome in result.items() if outcome is Outcome.STORED]
            if method != "append_many":  # a timeline's appends keep its marker (or none)
                for key in touched:
                    if is_marker(key, args[0][key]):
                        self.building.add(key)
                    else:
                        self.building.discard(key)
        elif method == "incr_many":
            touched = [k for k, value in result.items() if value is not None]
        elif method in ("cas_many", "cas"):
            values = args[0] if method == "cas_many" else {args[0]: (args[1], args[2])}
            outcomes = result if method == "cas_many" else {args[0]: result}
            for key, outcome in outcomes.items():
                if outcome is Outcome.STORED:
                    touched.append(key)
                    if is_marker(key, values[key][0]):
                        self.building.add(key)
                    else:
                        self.building.discard(key)
                elif outcome is Outcome.NOT_FOUND:
                    gone.append(key)
        elif method == "append_to_each":
            refused = {(i, k) for i, k, _ in result}
            touched = [k for i, (_, ks) in enumerate(args[0]) for k in ks if (i, k) not in refused]
        elif method == "delete_many":
            gone = list(args[0])
        elif method == "delete_if_unchanged":
            gone = [k for k, outcome in result.items() if outcome is not Outcome.EXISTS]
        elif method == "flush_all":
            self.present.clear()
            self.building.clear()
        self._forget(gone)
        for key in touched:
            self.present.pop(key, None)
            self.present[key] = None

    def _forget(self, keys: Iterable[bytes]) -> None:
        for key in keys:
            self.present.pop(key, None)
            self.building.discard(key)

    def evict(self, pick: Any) -> bytes | None:
        """DELETE one key believed present, as an LRU eviction would. ``pick(keys)`` chooses
        (the explorer's seeded choice); recent keys first in its list."""
        keys = list(reversed(self.present))
        if not keys:
            return None
        key: bytes = pick(keys)
        return key if self._delete([key]) else None

    def footprint(self, call: str, args: tuple[Any, ...]) -> frozenset[str] | None:
        """``footprint``, and for a lease expiry the lists being rebuilt right now."""
        if call == "fault.lease-expiry":  # what it expired, or would expire now
            claims = args[0] if args else sorted(self.building)
            return footprint("cache.delete_many", (claims,))
        if call == "fault.lose-bodies":  # what it lost, or would lose now
            bodies = args[0] if args else [k for k in self.present if self._is_body(k)]
            return footprint("cache.delete_many", (bodies,))
        return footprint(call, args)

    def expire_leases(self) -> list[bytes]:
        """Claims whose TTL has passed (a rebuild slower than ``ListSettings.lease_s``, a
        stalled process): claim TTLs are made too long to expire by the wall clock (that would
        not replay), so expiry is a fault the explorer injects. A claim is the list's head item
        holding a building marker: every head that holds one now is deleted, as its expiry
        would."""
        heads = [k for k in self.present if k.count(SEP) == 2]
        found = self.admin.get_many(heads)
        return self._delete(sorted(k for k, v in found.items() if is_marker(k, v)))

    def lose_bodies(self) -> list[bytes]:
        """Every post body item believed present, deleted (graph/timelines/post_bodies.py)."""
        return self._delete(sorted(k for k in self.present if self._is_body(k)))

    def _is_body(self, key: bytes) -> bool:
        return key.startswith(f"{self.namespace}|{post_bodies.CODE}|".encode())

    def restart(self, half: int) -> list[bytes]:
        """A memcached restart's loss spread over the servers: every key of this schedule in one
        half of a fixed hash is lost at once, the epochs left alone (``restart_server`` restarts
        one server, epoch copies and all)."""
        return self._delete([k for k in self.present if zlib.crc32(k) % 2 == half])

    # -- the verdict ------------------------------------------------------------------------------

    def checker(self) -> Process:
        """A fresh process for the verdict, with every server up (every cut healed) and usable
        (a lease on each, a fresh epoch where one was revoked): so the verdict reads the cache,
        not the store around it, and an epoch left unrevoked over stale items would be read."""
        for target, server in list(self.cuts):
            self.heal(target, server)
        proc = self.process(seed=0, scheduled=False, owner="check")
        proc.cluster.settle()
        return proc

    def observe(self, ids: Sequence[ListId]) -> list[tuple[ListId, frozenset[str], frozenset[str]]]:
        """For each follower/following list: what one read after quiescence returns
        (rebuilding it if absent) and what the store says it must be."""
        proc = self.checker()
        try:
            graph_ids = [i for i in ids if i[0] != TIMELINE]
            cached = proc.lists.read_many([_ref(i) for i in graph_ids])
            return [
                (i, cached[_ref(i)], frozenset(proc.store.all_members(_ref(i)))) for i in graph_ids
            ]
        finally:
            proc.close()

    def observe_timelines(
        self, ids: Sequence[ListId]
    ) -> list[tuple[ListId, list[tuple[str, list[Entry]]], list[Entry]]]:
        """For each timeline: what a reader is shown after quiescence, every way it can be
        read (a page of ``cap``; all pages of one, then of two, each from the last one's
        cursor; ``TimelineReader.view`` of the cached timeline, what ``fanout verify``
        compares, if it is cached), and the regeneration from the store. Each is the whole
        view: the newest ``cap`` live posts of the authors followed (posts of authors no
        longer followed are filtered at read time by design, deleted posts skipped, and
        entries below the cap not shown)."""
        proc = self.checker()
        try:
            out = []
            for list_id in (i for i in ids if i[0] == TIMELINE):
                ref, user = _ref(list_id), list_id[1]
                reads = [
                    ("page of cap", proc.pages(user, self.knobs.cap, pages=1)),
                    ("pages of 1", proc.pages(user, 1)),
                    ("pages of 2", proc.pages(user, 2)),
                ]
                cached = proc.timelines.cached_many([ref]).get(ref)
                if cached is not None:
                    following = proc.store.all_members(_ref(("following", user)))
                    view = proc.reader.view(user, cached, frozenset(following))
                    reads.append(("view", _entries(view)))
                members = proc.source.snapshot(ref).members
                regenerated = _entries(map(TimelineEntry.parse, members))
                out.append((list_id, reads, regenerated))
            return out
        finally:
            proc.close()

    def stored(self, ids: Sequence[ListId]) -> dict[ListId, frozenset[str]]:
        """The edge store's answer for follower/following lists (compared with the model)."""
        store = SqliteEdgeStore(self.db_path)
        try:
            return {i: frozenset(store.all_members(_ref(i))) for i in ids if i[0] != TIMELINE}
        finally:
            store.close()

    # -- reading traces back ----------------------------------------------------------------------

    def short(self, key: bytes) -> str:
        """A key without the namespace, generations as ``g{n}`` (see ``_hex``)."""
        text = _GEN.sub(rb"g\1", key).decode("ascii", "replace")
        return text.removeprefix(self.namespace + "|")

    def describe(self, step: Step) -> str:
        """One trace line's text: the call with its keys (namespace dropped) and result."""
        call, args, result = step.call, step.args, step.result
        name = call.split(".", 1)[-1]
        if call.startswith("cache."):
            return f"{name} {self._describe_cache(name, args, result, step.done)}"
        if call.startswith("store."):
            return f"store.{name}{self._describe_store(name, args, result, step.done)}"
        if call.startswith("sql."):
            return f"sql {name} {args[0] if args else ''}".rstrip()
        if call == "fault.evict":
            return f"EVICT {self.short(args[0]) if args and args[0] else 'nothing'}"
        if call == "fault.lease-expiry":
            expired = args[0] if args else []
            return f"LEASES EXPIRE: {' '.join(sorted(self.short(k) for k in expired)) or '-'}"
        if call == "fault.lose-bodies":
            return f"BODIES LOST: {' '.join(self.short(k) for k in (args[0] if args else []))}"
        if call == "fault.restart":
            lost = sorted(self.short(k) for k in result or [])
            return f"RESTART half {args[0]}: lost {len(lost)} keys {' '.join(lost)}"
        if call == "fault.server-restart":
            lost = sorted(self.short(k) for k in result or [])
            return f"SERVER {args[0]} RESTARTED EMPTY: lost {len(lost)} keys {' '.join(lost)}"
        if call == "fault.ring":
            version, state, servers = args
            return f"RING version {version} {state}: {' '.join(servers)}"
        if call == "fault.stall":
            owner, server, phase, point, seconds = args
            where = "sending to" if phase == "send" else "reading the reply of"
            return f"STALL {owner} {seconds:.1f}s at {point}, {where} {server}"
        if call == "fault.cut":
            target, server, mode = args
            who = {"*": "everyone"}.get(target, target.replace("!", "everyone but ", 1))
            return f"CUT {who} off {server} ({mode})"
        if call == "fault.heal":
            target, server, *ran = args
            result = ran[0] if ran else result
            late = f" ({result} requests run late)" if step.done and result else ""
            who = {"*": "everyone"}.get(target, target.replace("!", "everyone but ", 1))
            return f"HEAL {who} and {server}{late}"
        shown = " ".join([call, *map(str, args)])
        return f"{shown} → {result}" if step.done and result is not None else shown

    def _value(self, value: bytes) -> str:
        """Generations as ``g{n}``, positions as ``@{ts}`` (event time), timeline times without
        their zero padding."""
        value = _GEN.sub(rb"g\1", value)
        value = _POS.sub(lambda m: b"@%d" % (int(m[1], 16) >> OFFSET_BITS), value)
        text = re.sub(rb"(?<=[+-])0{6,}", b"", value).decode("ascii", "replace")
        return repr(text if len(text) <= 60 else text[:57] + "...")

    def _describe_cache(self, name: str, args: tuple[Any, ...], result: Any, done: bool) -> str:
        if name in ("get_many", "gets_many", "exists_many", "delete_many"):
            keys = [self.short(k) for k in args[0]]
            if name == "delete_many":  # often a set's order, which varies between processes
                keys.sort()
            if not done or name == "delete_many":
                return " ".join(keys)
            if name == "exists_many":
                return " ".join(
                    f"{self.short(k)}={'yes' if v else 'no'}" for k, v in result.items()
                )
            found = {
                self.short(k): (v[0] if isinstance(v, tuple) else v) for k, v in result.items()
            }
            return " ".join(f"{k}={self._value(found[k]) if k in found else '∅'}" for k in keys)
        if name in ("add_many", "append_many", "set_many", "incr_many", "decr_many"):
            values: Mapping[bytes, Any] = args[0]
            outcome = result if isinstance(result, dict) else {}
            op = {"add_many": "=", "set_many": ":=", "decr_many": "-="}.get(name, "+=")
            parts = []
            for key, value in values.items():
                shown = self._value(value) if isinstance(value, bytes) else str(value)
                ok: Any = outcome.get(key, "?") if done and name != "decr_many" else ""
                parts.append(f"{self.short(key)}{op}{shown}{_mark(ok) if done else '…'}")
            return ("ADD " if name == "add_many" else "") + " ".join(parts)
        if name == "cas":
            mark = _mark(result) if done else "…"
            return f"{self.short(args[0])}={self._value(args[1])}{mark}"
        if name == "cas_many":
            swaps: Mapping[bytes, tuple[bytes, bytes]] = args[0]
            return " ".join(
                f"{self.short(k)}={self._value(v)}{_mark(result.get(k)) if done else '…'}"
                for k, (v, _) in swaps.items()
            )
        if name == "delete_if_unchanged":
            return " ".join(
                f"{self.short(k)}{_mark(result.get(k)) if done else '…'}" for k in sorted(args[0])
            )
        if name == "available":  # whether each key's server may be used (memcache/trust.py)
            marks = result if done else ["…"] * len(args[0])
            return " ".join(
                f"{self.short(k)}={'yes' if ok is True else 'no' if ok is False else ok}"
                for k, ok in zip(args[0], marks, strict=True)
            )
        if name == "missed":  # keys a write skipped: their servers are revoked if they failed
            return f"{' '.join(sorted(self.short(k) for k in args[0]))} (since {args[1]})"
        if name == "append_to_each":  # followers come in a set's order: sorted
            return " ".join(
                f"{self._value(v)}→{','.join(sorted(self.short(k) for k in ks))}"
                for v, ks in args[0]
            )
        return " ".join(map(str, args))

    def _describe_store(self, name: str, args: tuple[Any, ...], result: Any, done: bool) -> str:
        def change(c: EdgeChange) -> str:
            ts = c.pos >> OFFSET_BITS
            return f"{c.follower}{'→' if c.active else '↛'}{c.followee}@{ts}"

        if name == "apply":
            sent = " ".join(map(change, args[0]))
            if not done:
                return f"({sent})"
            return f"({sent}) live=[{' '.join(map(change, result))}]"
        if name == "positions":
            edges = " ".join(f"{f}→{t}" for f, t in args[0])
            if not done:
                return f"({edges})"
            states: Mapping[tuple[str, str], EdgeState] = result
            shown = " ".join(
                f"{f}{'→' if st.active else '↛'}{t}@{st.pos >> OFFSET_BITS}"
                for (f, t), st in sorted(states.items())
            )
            return f"({edges}) → [{shown}]"
        if name == "snapshot":
            ref_: ListRef = args[0]
            if not done:
                return f"({ref_.kind.value}:{ref_.user}) → …"
            snap: Snapshot = result
            positions = snap.positions or [0] * len(snap.members)
            members = [
                f"{m}@{p >> OFFSET_BITS}" for m, p in zip(snap.members, positions, strict=True)
            ]
            return f"({ref_.kind.value}:{ref_.user}) → {members}"
        if name == "remove_user":
            user, pos = args
            shown = f"({user}@{pos >> OFFSET_BITS})"
            if isinstance(result, RemovedUser):
                shown += f" followers={list(result.followers)} following={list(result.following)}"
            return shown
        if name == "all_members":
            ref: ListRef = args[0]
            return f"({ref.kind.value}:{ref.user}) → {sorted(result) if done else '…'}"
        if name == "recent_posts":
            posts = [f"{p.author}/{p.post_id}" for p in result] if done else "…"
            return f"({sorted(args[0])}) → {posts}"
        if name in ("store_posts", "delete_posts", "post_bodies"):
            sent = " ".join(f"{p.author}/{p.post_id}" for p in args[0])
            if not done or name == "delete_posts":
                return f"({sent})"
            if name == "store_posts":  # the live ones, as stored (absent: deleted)
                return f"({sent}) live=[{' '.join(f'{r.author}/{r.post_id}' for r in result)}]"
            bodies: StoredBodies = result
            gone = " ".join(sorted(f"{r.author}/{r.post_id}" for r in bodies.deleted))
            return f"({sent}) live={len(bodies.texts)} deleted=[{gone}]"
        return f"{args}"

    # -- attribution ------------------------------------------------------------------------------

    def suspect(self, steps: Sequence[Step], events: Sequence[Event], failure: Any) -> str:
        """The adapter's reading of a failing trace: which known mechanism left this list (or
        the store) wrong. A guess for the report, never part of the verdict; it knows today's
        key and token layout, which is why it lives here."""
        guess = _Forensics(self.namespace, steps, events).explain(failure)
        if not guess and any(s.call in SERVER_FAULTS for s in steps):
            return "server-fault"  # no known mechanism; a server was cut off or restarted
        return guess


SERVER_FAULTS = frozenset({"fault.cut", "fault.server-restart"})
KIND_CODES = {"followers": "fl", "following": "fg", TIMELINE: "tl"}
# A generation: CLOCK_S plus a lifetime under 2**16 s, then the counter (``World._hex``).
_GEN = re.compile(rb"%04x[0-9a-f]{4}0*([0-9a-f]+)" % (CLOCK_S >> 16))
_POS = re.compile(rb"#([0-9a-f]+)")


def _mark(outcome: Any) -> str:
    marks: dict[Any, str] = {
        Outcome.STORED: "✓",
        Outcome.NOT_STORED: "✗",
        Outcome.EXISTS: "✗exists",
        Outcome.NOT_FOUND: "✗gone",
        Outcome.TOO_LARGE: "✗large",
        None: "∅",
    }
    return marks.get(outcome, f"={outcome}")


class _Forensics:
    """Reads one trace back for one wrong (list, member).

    The questions, in order: did a removal's redelivery forget neighbours (5); is the store
    itself wrong with a removal between an apply's read and write (6)? Otherwise find the
    generation the list holds now (the commit of its last claim), and the token that decides
    the member in it (greatest position). A stale token appended after the store turned the
    edge the other way is a replay (4) or a follow racing a removal (3); a token that was
    appended and is gone lost its shard to a re-ADD (7). No token: the rebuild's own content is
    wrong, because the store changed while it was in flight and either an invalidation came
    before its commit (1) or its claim vanished so the writer skipped it (2). The numbers are
    the rows of the mechanism table in docs/testing.md; the fenced design rules each out."""

    def __init__(self, namespace: str, steps: Sequence[Step], events: Sequence[Event]) -> None:
        self.ns = namespace
        self.steps = steps
        self.events = events

    def explain(self, failure: Any) -> str:
        if failure.list_id is None:
            return self._stuck_writer(failure.detail)
        kind, user = failure.list_id
        member: str = failure.member
        if kind == TIMELINE:
            _, author, post = member.split("!")
            edge = (user, author)
            if failure.kind == "deleted_shown":
                return self._body_after_deletion(author, post)
        else:
            edge, post = ((member, user) if kind == "followers" else (user, member)), ""
        if failure.kind == "store_vs_model":
            return "store-removal-race" if self._store_race(edge) else ""
        if self._removal_forgot(edge, failure.list_id):
            return "removal-not-idempotent"
        if self._redelivery_superseded(edge):
            return "redelivery-superseded"
        if kind != TIMELINE and self._drop_lost(f"{self.ns}|{KIND_CODES[kind]}|{user}".encode()):
            return "unreachable-counter-drop-lost"
        key = f"{self.ns}|{KIND_CODES[kind]}|{user}".encode()
        writes = self._writes(edge, post)
        commit, gen_prefix = self._commit(key, kind)
        token = self._last_token(key, gen_prefix, commit, member)
        extra = failure.kind.endswith("_extra")
        if token is not None:
            at, actor, sign = token
            if self._shard_readded(key, gen_prefix, at):
                return "shard-readded"
            if sign == extra:  # the token says what the list says: it was stale when appended
                before = [w for w in writes if w[0] < at]
                if not before or before[-1][1] == actor:
                    return "stale-append"
                if before[-1][2] == "remove_user":  # a removal from the other partition
                    return "removal-vs-follow"
                # The edge's own partition, applied by a second consumer (a replay, a
                # zombie) between this writer's store step and its append.
                return "replay-or-zombie"
            return ""
        if commit is None:
            return ""
        rebuilder = self.steps[commit].actor
        read = self._rebuild_read(rebuilder, commit, kind, user)
        if read is None:
            return ""
        raced = [w for w in writes if read < w[0] < commit]
        if not raced:
            return ""
        changed = raced[-1][0]
        if any(
            s.call == "cache.delete_many" and key in s.args[0] for s in self.steps[changed:commit]
        ):
            return "unfenced-rebuild"
        if self._lease_lost(key, rebuilder, commit):
            return "lease-lost"
        return ""

    def _drop_lost(self, key: bytes) -> bool:
        """A writer found the newest shard's counter of this list on an unusable server
        (``missed`` names it), skipped its write and dropped the list only if its head was
        unchanged; the head had changed since the writer read it (a build committed, a
        rollover), so the drop failed (EXISTS) and the list stayed without the write: revoking
        the counter's server loses the counter, not the shards that hold the list."""
        counters: dict[str, int] = {}  # per actor, its first such skip
        for s in self.steps:
            if s.call == "cache.missed" and any(
                k.startswith(key + SEP) and k.endswith(SEP + b"n") for k in s.args[0]
            ):
                counters.setdefault(s.actor, s.index)
        return any(
            s.call == "cache.delete_if_unchanged"
            and s.done
            and s.result.get(key) is Outcome.EXISTS
            and counters.get(s.actor, s.index) < s.index
            for s in self.steps
        )

    def _body_after_deletion(self, author: str, post: str) -> str:
        """A deleted post shown: the post's body item was written live after a deletion's SET
        of ``x`` (the fence of graph/timelines/post_bodies.py broken), no deletion ever wrote
        it (the consumer skipped the item), or it said deleted and the page showed the post
        all the same."""
        key = f"{self.ns}|{post_bodies.CODE}|{author}|{post}".encode()
        deleted = False
        for s in self.steps:
            if not s.done or s.call not in ("cache.set_many", "cache.add_many", "cache.cas_many"):
                continue
            if s.result.get(key) is not Outcome.STORED:
                continue
            written = s.args[0][key]
            value = written[0] if isinstance(written, tuple) else written
            if value == post_bodies.DELETED:
                deleted = True
            elif deleted and value != FILLING:
                return "body-resurrected"
        return "body-ignored" if deleted else "deletion-unwritten"

    def _stuck_writer(self, detail: str) -> str:
        """A writer that gave up on a list (ListWriteError) because its newest shard and that
        shard's counter were both gone: every round INCRs the counter (missing), reads the
        shard to re-seed it (missing too), seeds nothing and goes round again, never reaching
        the APPEND that would find the shard missing and drop the list."""
        actor = detail.split(":", 1)[0]
        if "ListWriteError" not in detail:
            return ""
        mine = [s for s in self.steps if s.actor == actor and s.done]
        for before, after in pairwise(mine):
            if (
                before.call == "cache.incr_many"
                and None in before.result.values()
                and after.call == "cache.get_many"
                and not after.result
            ):
                return "recount-without-shard"
        return ""

    # -- the store's side -------------------------------------------------------------------------

    def _commit_of(self, call: int) -> int:
        """The step at which a store call's transaction ran: its actor's next BEGIN."""
        actor = self.steps[call].actor
        for s in self.steps[call + 1 :]:
            if s.actor == actor and s.call == "sql.begin":
                return s.index
        return call

    def _writes(self, edge: tuple[str, str], post: str) -> list[tuple[int, str, str]]:
        """Store writes that decided this edge (or stored this post): (step, actor, call)."""
        found = []
        follower, followee = edge
        for s in self.steps:
            if not s.done:
                continue
            if s.call == "store.apply":
                if any((c.follower, c.followee) == edge for c in s.result):
                    found.append((self._commit_of(s.index), s.actor, "apply"))
            elif s.call == "store.remove_user" and isinstance(s.result, RemovedUser):
                removed = s.args[0]
                if (removed == follower and followee in s.result.following) or (
                    removed == followee and follower in s.result.followers
                ):
                    found.append((self._commit_of(s.index), s.actor, "remove_user"))
            elif s.call == "store.store_posts" and any(p.post_id == post for p in s.args[0]):
                found.append((self._commit_of(s.index), s.actor, "store_posts"))
        return sorted(found)

    def _store_race(self, edge: tuple[str, str]) -> bool:
        """An apply of this edge read the removal marks, then a removal of one of its users
        committed, then the apply wrote: the removal check was made on stale marks."""
        for s in self.steps:
            if s.call != "store.apply" or not any(
                (c.follower, c.followee) == edge for c in s.args[0]
            ):
                continue
            mine = [t for t in self.steps[s.index + 1 :] if t.actor == s.actor]
            read = next((t.index for t in mine if t.call == "sql.select"), None)
            write = next((t.index for t in mine if t.call == "sql.begin"), None)
            if read is None or write is None:
                continue
            for t in self.steps[:write]:
                removal = t.call == "store.remove_user" and t.args[0] in edge
                if removal and read < self._commit_of(t.index) < write:
                    return True
        return False

    def _removal_forgot(self, edge: tuple[str, str], list_id: ListId) -> bool:
        """A removal's store step named this list's user as a neighbour but its list step never
        ran (a crash), and the redelivered removal found no neighbours left to invalidate."""
        kind, owner = list_id
        if kind == TIMELINE:
            return False
        removals = [s for s in self.steps if s.call == "store.remove_user" and s.done]
        for first in removals:
            if first.args[0] not in edge or owner not in self._neighbours(first):
                continue
            if any(
                s.index > first.index and s.args == first.args and owner not in self._neighbours(s)
                for s in removals
            ):
                return True
        return False

    def _redelivery_superseded(self, edge: tuple[str, str]) -> bool:
        """A batch crashed after its store step with this edge's change current; by its
        redelivery a removal had stamped the edge with the removal's position, so the change
        was no longer current and its token was never appended (and the removal did not name
        the neighbour: the edge was already inactive in the store)."""
        applies = [s for s in self.steps if s.call == "store.apply" and s.done]
        removals = [
            self._commit_of(s.index)
            for s in self.steps
            if s.call == "store.remove_user" and s.args[0] in edge
        ]
        for first in applies:
            for change in first.result:
                if (change.follower, change.followee) != edge:
                    continue
                for again in applies:
                    if (
                        again.index > first.index
                        and again.actor == first.actor
                        and change in again.args[0]
                        and change not in again.result
                        and any(first.index < r < self._checked(again) for r in removals)
                    ):
                        return True
        return False

    def _checked(self, call: Step) -> int:
        """When an apply read back which of its changes are current: the first SELECT of its
        actor after its transaction."""
        begin = self._commit_of(call.index)
        mine = (s for s in self.steps[begin + 1 :] if s.actor == call.actor)
        return next((s.index for s in mine if s.call == "sql.select"), begin)

    @staticmethod
    def _neighbours(step: Step) -> set[str]:
        result = step.result
        return set(result.followers) | set(result.following)

    # -- the cache's side -------------------------------------------------------------------------

    def _commit(self, key: bytes, kind: str) -> tuple[int | None, bytes]:
        """The commit of the generation the list holds now (the first CAS that replaced the
        last successful claim's marker; None: built before the trace) and the prefix of the
        keys holding its tokens."""
        claim, gen = None, b""
        for s in reversed(self.steps):
            if s.call == "cache.add_many" and s.done and s.result.get(key) is Outcome.STORED:
                claim = s.index
                value: bytes = s.args[0][key]
                gen = value.split()[0].strip(graph_lists.fencing.BUILDING)
                break
        prefix = key if kind == TIMELINE else (key + SEP + gen + SEP if gen else b"")
        if claim is None:
            return None, prefix
        for s in self.steps[claim + 1 :]:
            if s.call == "cache.cas_many" and s.done and s.result.get(key) is Outcome.STORED:
                return s.index, prefix
        return None, prefix

    def _shard_keys(self, key: bytes, prefix: bytes, candidate: bytes) -> bool:
        if prefix == key:
            return candidate == key
        counter = candidate.endswith(SEP + b"n")
        if prefix:
            return candidate.startswith(prefix) and not counter
        rest = candidate[len(key) :]
        return candidate.startswith(key + SEP) and rest.count(SEP) == 2 and not counter

    def _last_token(
        self, key: bytes, prefix: bytes, commit: int | None, member: str
    ) -> tuple[int, str, bool] | None:
        """(step, actor, is-addition) of the token that decides ``member`` (greatest
        position, a removal winning a tie) among those stored in the list's current generation
        after its commit."""
        wanted = member.encode()
        best: tuple[int, bool, int, str] | None = None  # pos, add, step, actor
        start = 0 if commit is None else commit + 1
        for s in self.steps[start:]:
            if not s.done:
                continue
            values: list[bytes] = []
            if s.call in ("cache.append_many", "cache.add_many"):
                values = [
                    v
                    for k, v in s.args[0].items()
                    if s.result.get(k) is Outcome.STORED and self._shard_keys(key, prefix, k)
                ]
            elif s.call == "cache.append_to_each":
                refused = {(i, k) for i, k, _ in s.result}
                values = [
                    v
                    for i, (v, ks) in enumerate(s.args[0])
                    for k in ks
                    if k == key and (i, k) not in refused
                ]
            for value in values:
                for tok in value.split():
                    name, _, pos = tok[1:].partition(b"#")
                    if name != wanted or tok[:1] not in (b"+", b"-"):
                        continue
                    add, at = tok[:1] == b"+", int(pos or b"0", 16)
                    if best is None or at > best[0] or (at == best[0] and not add):
                        best = (at, add, s.index, s.actor)
        return None if best is None else (best[2], best[3], best[1])

    def _shard_readded(self, key: bytes, prefix: bytes, at: int) -> bool:
        """A shard of the list was lost (evicted, restarted) and then ADDed again by a
        rollover after the token was appended to it."""
        lost: set[bytes] = set()
        for s in self.steps:
            if s.call == "fault.evict" and s.args and s.args[0]:
                lost.add(s.args[0])
            elif s.call in ("fault.restart", "fault.server-restart") and s.done:
                lost.update(s.result)
            elif s.call == "cache.add_many" and s.done and s.index > at:
                for k, ok in s.result.items():
                    if ok and k in lost and self._shard_keys(key, prefix, k) and k != key:
                        return True
        return False

    def _rebuild_read(self, actor: str, commit: int, kind: str, user: str) -> int | None:
        """When the rebuild that committed at ``commit`` read the store for this list (a
        timeline: the owner's following list)."""
        wanted = ListRef(ListKind.FOLLOWING, user) if kind == TIMELINE else _ref((kind, user))
        for s in reversed(self.steps[:commit]):
            if (
                s.actor == actor
                and s.call in ("store.snapshot", "store.all_members")
                and s.args[0] == wanted
            ):
                mine = (t for t in self.steps[s.index :] if t.actor == actor)
                return next((t.index for t in mine if t.call == "sql.select"), s.index)
        return None

    def _lease_lost(self, lease: bytes, rebuilder: str, commit: int) -> bool:
        taken = None
        for s in reversed(self.steps[:commit]):
            if s.actor == rebuilder and s.call == "cache.add_many" and s.done:
                if s.result.get(lease) is not Outcome.STORED:
                    continue
                taken = s.index
                break
        if taken is None:
            return False
        for s in self.steps[taken:commit]:
            if s.call == "fault.evict" and s.args and s.args[0] == lease:
                return True
            restarted = s.call in ("fault.restart", "fault.server-restart") and s.done
            if restarted and lease in s.result:
                return True
            if s.call == "fault.lease-expiry" and s.args and lease in s.args[0]:
                return True
            if s.call == "cache.delete_many" and s.actor != rebuilder and lease in s.args[0]:
                return True
        return False


class _SwappedRing(HeldRing):
    """The world's ring record: first ``s0``-``s2``, the same in every session;
    each swap (``change_ring``'s steps) is a step of the schedule, a fault that may hit any
    process."""

    def __init__(self, world: World) -> None:
        super().__init__(RingRecord.of(world.servers[:FIRST_RING]))
        self._world = world
        self._first = self.record
        self._seen: dict[str, RingRecord] = {}  # per actor, the record it last read

    def read_ring(self) -> RingRecord | None:
        """The record, and a line in the trace when the reading process finds it changed."""
        record = super().read_ring()
        sched = self._world.scheduler
        actor = sched.current() if sched is not None else None
        first = self._first
        if record is not None and actor is not None and self._seen.get(actor, first) != record:
            self._seen[actor] = record
            state = "moving" if record.moving else "stable"
            sched.note("ring.read", (record.version, state))
        return record

    def swap_ring(self, expected: RingRecord | None, record: RingRecord) -> bool:
        sched = self._world.scheduler
        state = "moving" if record.moving else "stable"
        step = sched.pause("fault.ring", (record.version, state, record.servers)) if sched else None
        swapped = super().swap_ring(expected, record)
        if step is not None:
            step.result, step.done = swapped, True
        return swapped
