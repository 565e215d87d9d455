"""Everything the explorer knows about the project's API, in one module.

The graph layer is being redesigned on another branch (keys, tokens and fencing will change), so
the scheduler, the scenarios and the invariants never touch the project directly: they go
through ``World`` (one schedule's shared cache, store file and namespace) and ``Process`` (the
objects one consumer process would own). Whatever the redesign renames or re-keys is fixed here
and only here; the names this relies on are listed in ``PROJECT_API``.

Things that are internals on purpose and would move with the redesign:
- yield points *inside* an edge-store call (``_YieldingConnection`` on ``SqliteEdgeStore._db``),
  without which a store call is atomic and a race between its read and its write is invisible;
- the module globals of graph/lists.py that make a run time- and entropy-dependent (its clock,
  its sleep, its generation names, the lease TTL), replaced for reproducibility;
- reading the trace back (``describe``, ``suspect``), which knows the key and token layout.
"""

from __future__ import annotations

import re
import sqlite3
import zlib
from collections.abc import Iterator, Mapping, Sequence, Sized
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import graph.lists
from consumers.fanout_apply import FanoutApplier
from consumers.graph_apply import GraphApplier
from consumers.loop import TRANSIENT
from consumers.positions import OFFSET_BITS, Origin, Positioned, position
from graph.cache import MemcacheCluster
from graph.capped_lists import CappedListStore
from graph.edges import EdgeChange, EdgeStore, RemovedUser
from graph.lists import ListKind, ListRef, ListSettings, ListStore
from graph.sqlite_edges import SqliteEdgeStore
from graph.timelines import TimelineEntry, TimelineReader, TimelineSource
from producers.publisher import DeliveryReport
from schemas import AnyEvent, Follow, Post, Unfollow, UserRemoved
from tests.explore.model import Event, ListId
from tests.explore.scheduler import Proxy, Scheduler, Step

__all__ = [
    "PROJECT_API",
    "TRANSIENT",
    "Knobs",
    "Process",
    "World",
    "footprint",
    "is_read",
    "is_write",
]

PROJECT_API = (
    "MemcacheCluster(servers) and its batch methods",
    "SqliteEdgeStore(path), EdgeStore.all_members/apply/remove_user",
    "ListStore/CappedListStore(cache, source, ListSettings, rng): read_many, invalidate, "
    "rebuild_many(force=True)",
    "GraphApplier(store, lists).apply(batch); .record(batch) for a crash after the store step",
    "FanoutApplier(...).apply(batch); TimelineSource, TimelineReader",
    "Positioned(event, position(ts, offset), Origin(...), raw)",
)

KINDS = {"followers": ListKind.FOLLOWERS, "following": ListKind.FOLLOWING}
TIMELINE = "timeline"
CACHE_WRITES = ("add_many", "append_many", "set_many", "cas", "incr_many", "append_to_each")
# Far longer than any schedule: a lease disappears only when the explorer evicts it or
# "restarts" a server, never because the wall clock moved (that would not replay).
LEASE_S = 3600


@dataclass(frozen=True, slots=True)
class Knobs:
    """List settings for one schedule: small shards so rollovers and compactions happen."""

    shard_bytes: int = 64
    dirty_min: int = 2
    dirty_ratio: float = 0.5
    compact_write_prob: float = 0.0
    cap: int = 800


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
            table = re.search(r"\b(edges|users|posts|celebrities)\b", sql)
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
    if method in ("remove_user", "followers", "following", "counts"):
        return frozenset([first])
    if method == "all_members":
        return frozenset([first.user])
    if method == "recent_posts":
        return frozenset(first)
    if method == "store_posts":
        return frozenset(p.author for p in first)
    return frozenset()


def footprint(call: str, args: tuple[Any, ...]) -> frozenset[str] | None:
    """The users a call is about: a store call's edges or lists, the owners of the cache keys
    (``{ns}:{kind}:{user}...``). None for faults, which may hit anything. The scheduler lets
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
        return frozenset(k.split(b":")[2].decode() for k in keys if k.count(b":") >= 2)
    return frozenset()


READS = frozenset(
    {
        "store.all_members",
        "store.recent_posts",
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
        "sql.begin",
        "cache.add_many",
        "cache.append_many",
        "cache.append_to_each",
        "cache.set_many",
        "cache.cas",
        "cache.delete_many",
        "cache.flush_all",
        "fault.evict",
        "fault.restart",
        "fault.lease-expiry",
    }
)


def is_write(call: str) -> bool:
    """Calls that change shared state (a store transaction, a cache write, a fault)."""
    return call in WRITES


def _no_keys(method: str, args: tuple[Any, ...]) -> bool:
    """A batch call with an empty batch (the list code makes many: no leases to take, no
    shards to rewrite): it sends nothing to memcached, so it is not a yield point."""
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
        return sorted(result)
    return result


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
    return Post(type="post", author=e.user, post_id=e.other, ts=e.ts)


def positioned(e: Event) -> Positioned:
    topic = "x.posts" if e.kind == "post" else "x.graph"
    key = (e.other if e.kind in ("follow", "unfollow") else e.user).encode()
    return Positioned(
        _event(e), position(e.ts, e.offset), Origin(topic, e.partition, e.offset, key), b""
    )


class Process:
    """What one consumer (or reader) process owns: its own store connection, list objects and
    appliers, over the schedule's shared (proxied) cache. Built inside the actor's thread,
    because a sqlite3 connection belongs to the thread that opened it."""

    def __init__(self, world: World, seed: int, scheduled: bool) -> None:
        import random

        rng = random.Random(seed)
        raw = SqliteEdgeStore(world.db_path)
        self._raw = raw
        scheduler = world.scheduler
        if scheduled and scheduler is not None:
            tracked = _Tracked(raw)
            raw._db = cast(sqlite3.Connection, _YieldingConnection(raw._db, scheduler, tracked))
            store = cast(EdgeStore, Proxy(tracked, scheduler, "store"))
            cache = world.cache
        else:  # setup and checks: not scheduled, but in the same canonical order
            store, cache = raw, world.cache
        self.store = store
        knobs = world.knobs
        settings = ListSettings(
            shard_bytes=knobs.shard_bytes,
            dirty_ratio=knobs.dirty_ratio,
            dirty_min=knobs.dirty_min,
            compact_write_prob=knobs.compact_write_prob,
            namespace=world.namespace,
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
        )
        self.lists = ListStore(cache, store, settings, rng)
        self.source = TimelineSource(store, knobs.cap)
        self.timelines = CappedListStore(cache, self.source, capped, rng)
        self.graph = GraphApplier(store, self.lists)
        self.fanout = FanoutApplier(
            store, self.lists, self.timelines, cast(Any, _NoChunkTasks()), 10**6, 10**9
        )
        self.reader = TimelineReader(store, self.lists, self.timelines, knobs.cap)

    def apply(self, events: Sequence[Event]) -> None:
        """One batch, as the consumer of its topic applies it."""
        posts = [positioned(e) for e in events if e.kind == "post"]
        edges = [positioned(e) for e in events if e.kind != "post"]
        if edges:
            self.graph.apply(edges)
        if posts:
            self.fanout.apply(posts)

    def apply_store_only(self, events: Sequence[Event]) -> None:
        """A consumer that crashed after the edge-store step of a graph batch, before its
        lists: the batch is not committed and will be delivered again."""
        self.graph.record([positioned(e) for e in events if e.kind != "post"])

    def read(self, ids: Sequence[ListId]) -> None:
        """Readers: follower/following lists in one ``read_many``; a timeline through the
        real read path (following list, timeline, celebrity merge)."""
        refs = [_ref(i) for i in ids if i[0] != TIMELINE]
        if refs:
            self.lists.read_many(refs)
        for kind, user in ids:
            if kind == TIMELINE:
                self.reader.read(user)

    def invalidate(self, ids: Sequence[ListId]) -> None:
        self._split(ids, lambda lists, refs: lists.invalidate(refs))

    def rebuild(self, ids: Sequence[ListId]) -> None:
        """``fanout rebuild-cache``: drop and rebuild now."""
        self._split(ids, lambda lists, refs: lists.rebuild_many(refs, force=True))

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


class World:
    """One schedule's shared things: the real cluster (flushed first: a seed must find the
    same empty cache every time it runs), the SQLite file, the namespace, and the keys seen
    written, for evictions that need no knowledge of the key layout."""

    def __init__(
        self,
        cluster: MemcacheCluster,
        db_path: Path,
        namespace: str,
        knobs: Knobs,
        gen_seed: int,
    ) -> None:
        import random

        self.cluster = cluster
        self.db_path = db_path
        self.namespace = namespace
        self.knobs = knobs
        self.scheduler: Scheduler | None = None
        self.cache = cluster
        self.present: dict[bytes, None] = {}  # keys believed present, least recent first
        self._gens = random.Random(gen_seed)
        cluster.flush_all()

    # -- wiring -----------------------------------------------------------------------------------

    @contextmanager
    def scheduled(self, scheduler: Scheduler) -> Iterator[None]:
        """Route the schedule's cache calls through the scheduler, and make graph/lists.py's
        waits, lease expiry and generation names deterministic for the duration."""
        self.scheduler = scheduler
        self.cache = cast(
            MemcacheCluster,
            Proxy(self.cluster, scheduler, "cache", self._seen, _canonical, _no_keys),
        )
        patches = {
            "time": SimpleNamespace(monotonic=scheduler.monotonic, sleep=scheduler.sleep),
            "secrets": SimpleNamespace(token_hex=self._gen),
            "REBUILD_LEASE_S": LEASE_S,
        }
        saved = {name: getattr(graph.lists, name) for name in patches}
        for name, value in patches.items():
            setattr(graph.lists, name, value)
        try:
            yield
        finally:
            for name, value in saved.items():
                setattr(graph.lists, name, value)

    def _gen(self, nbytes: int) -> str:
        return f"{self._gens.getrandbits(8 * nbytes):0{2 * nbytes}x}"

    def process(self, seed: int, scheduled: bool = True) -> Process:
        return Process(self, seed, scheduled)

    # -- cache faults -----------------------------------------------------------------------------

    def _seen(self, method: str, args: tuple[Any, ...], result: Any) -> None:
        """Track which keys exist from the calls that went through the proxy."""
        touched: list[bytes] = []
        if method in ("add_many", "append_many", "incr_many"):
            touched = [k for k, ok in result.items() if ok not in (False, None)]
        elif method == "set_many":
            touched = list(args[0])
        elif method == "cas" and result:
            touched = [args[0]]
        elif method == "append_to_each":
            refused = set(result)
            touched = [k for i, (_, ks) in enumerate(args[0]) for k in ks if (i, k) not in refused]
        elif method == "delete_many":
            for key in args[0]:
                self.present.pop(key, None)
        elif method == "flush_all":
            self.present.clear()
        for key in touched:
            self.present.pop(key, None)
            self.present[key] = None

    def evict(self, pick: Any) -> bytes | None:
        """DELETE one key believed present, as an LRU eviction would. ``pick(keys)`` chooses
        (the explorer's seeded choice); recent keys first in its list."""
        keys = list(reversed(self.present))
        if not keys:
            return None
        key: bytes = pick(keys)
        self.cluster.delete_many([key])
        self.present.pop(key, None)
        return key

    def footprint(self, call: str, args: tuple[Any, ...]) -> frozenset[str] | None:
        """``footprint``, and for a lease expiry the lists being rebuilt right now."""
        if call == "fault.lease-expiry":  # what it expired, or would expire now
            leases = args[0] if args else [k for k in self.present if k.endswith(b":rb")]
            return footprint("cache.delete_many", (leases,))
        return footprint(call, args)

    def expire_leases(self) -> list[bytes]:
        """Rebuild leases whose TTL has passed (a rebuild slower than ``REBUILD_LEASE_S``, a
        stalled process): lease TTLs are made too long to expire by the wall clock (that would
        not replay), so expiry is a fault the explorer injects. Today a lease is the item
        ``{list}:rb``; whatever fences rebuilds after the redesign belongs here."""
        leases = [k for k in self.present if k.endswith(b":rb")]
        self.cluster.delete_many(leases)
        for key in leases:
            self.present.pop(key, None)
        return leases

    def restart(self, half: int) -> list[bytes]:
        """A memcached server restart, placement-independent: every key of this schedule in
        one half of a fixed hash is lost at once. (A real flush of one server would lose the
        keys the live ring puts there, which depends on the session's free ports, so the same
        seed would lose different keys in another session.)"""
        lost = [k for k in self.present if zlib.crc32(k) % 2 == half]
        self.cluster.delete_many(lost)
        for key in lost:
            self.present.pop(key, None)
        return lost

    # -- the verdict ------------------------------------------------------------------------------

    def observe(self, ids: Sequence[ListId]) -> list[tuple[ListId, frozenset[str], frozenset[str]]]:
        """For each list: what one read after quiescence returns (rebuilding it if absent) and
        what the store says it must be. A timeline is compared as a reader sees it: posts of
        authors the user no longer follows are filtered at read time by design, so they are
        left out; what must match is the regeneration from the store."""
        proc = self.process(seed=0, scheduled=False)
        try:
            out = []
            graph_ids = [i for i in ids if i[0] != TIMELINE]
            cached = proc.lists.read_many([_ref(i) for i in graph_ids])
            for list_id in graph_ids:
                ref = _ref(list_id)
                out.append((list_id, cached[ref], frozenset(proc.store.all_members(ref))))
            for list_id in (i for i in ids if i[0] == TIMELINE):
                ref = _ref(list_id)
                following = frozenset(
                    proc.store.all_members(ListRef(ListKind.FOLLOWING, list_id[1]))
                )
                members = proc.timelines.read_many([ref])[ref]
                view = frozenset(m for m in members if TimelineEntry.parse(m).author in following)
                out.append((list_id, view, frozenset(proc.source.all_members(ref))))
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
        text = key.decode("ascii", "replace")
        return text.removeprefix(self.namespace + ":")

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
        if call == "fault.restart":
            lost = sorted(self.short(k) for k in result or [])
            return f"RESTART half {args[0]}: lost {len(lost)} keys {' '.join(lost)}"
        shown = " ".join([call, *map(str, args)])
        return f"{shown} → {result}" if step.done and result is not None else shown

    def _value(self, value: bytes) -> str:
        text = re.sub(rb"(?<=[+-])0{6,}", b"", value).decode("ascii", "replace")
        return repr(text if len(text) <= 48 else text[:45] + "...")

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
        if name in ("add_many", "append_many", "set_many", "incr_many"):
            values: Mapping[bytes, Any] = args[0]
            outcome = result if isinstance(result, dict) else {}
            parts = []
            for key, value in values.items():
                shown = self._value(value) if isinstance(value, bytes) else str(value)
                ok: Any = outcome.get(key, "?") if done else "…"
                marks: dict[Any, str] = {True: "✓", False: "✗", None: "∅"}
                mark = marks.get(ok, str(ok))
                parts.append(f"{self.short(key)}{'+=' if name != 'set_many' else '='}{shown}{mark}")
            return " ".join(parts)
        if name == "cas":
            return f"{self.short(args[0])}={self._value(args[1])} → {result}"
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
            return f"({sent}) current=[{' '.join(map(change, result))}]"
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
        return f"{args}"

    # -- attribution ------------------------------------------------------------------------------

    def suspect(self, steps: Sequence[Step], events: Sequence[Event], failure: Any) -> str:
        """The adapter's reading of a failing trace: which known mechanism left this list (or
        the store) wrong. A guess for the report, never part of the verdict; it knows today's
        key and token layout, which is why it lives here."""
        return _Forensics(self.namespace, steps, events).explain(failure)


KIND_CODES = {"followers": "fl", "following": "fg", TIMELINE: "tl"}


class _Forensics:
    """Reads one trace back for one wrong (list, member).

    The questions, in order: did a removal's redelivery forget neighbours (5); is the store
    itself wrong with a removal between an apply's read and write (6)? Otherwise find the
    generation the list holds now (its last index ADD), and the last token about the member
    appended to it. A stale token appended after the store turned the edge the other way is a
    replay (4) or a follow racing a removal (3); a token that was appended and is gone lost its
    shard to a re-ADD (7). No token: the rebuild's own content is wrong, because the store
    changed while it was in flight and either an invalidation came before its commit (1) or its
    lease vanished so the writer skipped it (2)."""

    def __init__(self, namespace: str, steps: Sequence[Step], events: Sequence[Event]) -> None:
        self.ns = namespace
        self.steps = steps
        self.events = events

    def explain(self, failure: Any) -> str:
        if failure.list_id is None:
            return ""
        kind, user = failure.list_id
        member: str = failure.member
        if kind == TIMELINE:
            author = member.split("/")[1]
            edge, post = (user, author), member.split("/")[2]
        else:
            edge, post = ((member, user) if kind == "followers" else (user, member)), ""
        if failure.kind == "store_vs_model":
            return "store-removal-race" if self._store_race(edge) else ""
        if self._removal_forgot(edge, failure.list_id):
            return "removal-not-idempotent"
        if self._redelivery_superseded(edge):
            return "redelivery-superseded"
        key = f"{self.ns}:{KIND_CODES[kind]}:{user}".encode()
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
        if self._lease_lost(key + b":rb", rebuilder, commit):
            return "lease-lost"
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
        """The last successful ADD of the list's index (None: built before the trace) and the
        prefix of the keys holding its tokens."""
        for s in reversed(self.steps):
            if s.call == "cache.add_many" and s.done and s.result.get(key):
                if kind == TIMELINE:
                    return s.index, key
                gen = s.args[0][key].split()[0]
                return s.index, key + b":" + gen + b":"
        if kind == TIMELINE:
            return None, key
        return None, b""

    def _shard_keys(self, key: bytes, prefix: bytes, candidate: bytes) -> bool:
        if prefix == key:
            return candidate == key
        if prefix:
            return candidate.startswith(prefix) and not candidate.endswith(b":n")
        rest = candidate[len(key) :]
        return (
            candidate.startswith(key + b":") and rest.count(b":") == 2 and not rest.endswith(b":n")
        )

    def _last_token(
        self, key: bytes, prefix: bytes, commit: int | None, member: str
    ) -> tuple[int, str, bool] | None:
        """(step, actor, is-addition) of the last token about ``member`` stored in the list's
        current generation after its commit."""
        tokens = {b"+" + member.encode(): True, b"-" + member.encode(): False}
        last = None
        start = 0 if commit is None else commit + 1
        for s in self.steps[start:]:
            if not s.done:
                continue
            values: list[bytes] = []
            if s.call in ("cache.append_many", "cache.add_many"):
                values = [
                    v
                    for k, v in s.args[0].items()
                    if s.result.get(k) and self._shard_keys(key, prefix, k)
                ]
            elif s.call == "cache.append_to_each":
                refused = set(s.result)
                values = [
                    v
                    for i, (v, ks) in enumerate(s.args[0])
                    for k in ks
                    if k == key and (i, k) not in refused
                ]
            for value in values:
                for tok in value.split():
                    if tok in tokens:
                        last = (s.index, s.actor, tokens[tok])
        return last

    def _shard_readded(self, key: bytes, prefix: bytes, at: int) -> bool:
        """A shard of the list was lost (evicted, restarted) and then ADDed again by a
        rollover after the token was appended to it."""
        lost: set[bytes] = set()
        for s in self.steps:
            if s.call == "fault.evict" and s.args and s.args[0]:
                lost.add(s.args[0])
            elif s.call == "fault.restart" and s.done:
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
            if s.actor == actor and s.call == "store.all_members" and s.args[0] == wanted:
                mine = (t for t in self.steps[s.index :] if t.actor == actor)
                return next((t.index for t in mine if t.call == "sql.select"), s.index)
        return None

    def _lease_lost(self, lease: bytes, rebuilder: str, commit: int) -> bool:
        taken = None
        for s in reversed(self.steps[:commit]):
            if s.actor == rebuilder and s.call == "cache.add_many" and s.done:
                if not s.result.get(lease):
                    continue
                taken = s.index
                break
        if taken is None:
            return False
        for s in self.steps[taken:commit]:
            if s.call == "fault.evict" and s.args and s.args[0] == lease:
                return True
            if s.call == "fault.restart" and s.done and lease in s.result:
                return True
            if s.call == "fault.lease-expiry" and s.args and lease in s.args[0]:
                return True
            if s.call == "cache.delete_many" and s.actor != rebuilder and lease in s.args[0]:
                return True
        return False
