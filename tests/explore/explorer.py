"""Random but reproducible schedules of concurrent graph actors, checked after quiescence.

A *schedule* is one seed: the seed draws a workload (an event log split over partitions, list
settings, which actors exist and what each does) and then every scheduling decision (see
scheduler.py). The actors run the project's real appliers, lists and edge store, through
adapter.py, against the real memcached servers of the test stack and a real SQLite file. When
every actor has finished, one more read of every list must give exactly what the edge store
holds, and the edge store must hold exactly what the events say (tests/explore/model.py).

Why random schedules and not hand-written interleavings: a hand-written race test is one person
imagining one interleaving; the explorer finds those, and the ones nobody imagined, by itself
(docs/testing.md lists the mechanisms its forensics name).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import random
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.explore import adapter
from tests.explore.model import POST_KINDS, Entry, Event, GraphModel, Kind, ListId
from tests.explore.scheduler import Aborted, Hang, Scheduler, Step
from timeline_fanout.memcache.cluster import MemcacheCluster
from timeline_fanout.memcache.ring_change import change_ring, hold_s

SCENARIOS = ("graph", "removal", "hotlist", "timeline", "deletion")
TIMELINE_SCENARIOS = ("timeline", "deletion")
DEFAULT_SCHEDULES = 100  # per scenario: 500 in all
WRITER_ATTEMPTS = 6  # a consumer retries a failed batch; it never skips one
# Steps from the last cache-server fault to the end of the claims it left (see server_faults).
CLAIM_TTL_STEPS = 100
# Fault actors: they own a process but use it for nothing a cut off a server would change.
PASSIVE = frozenset({"evictor", "leaseclock", "restart", "ring"})
# A consumer's backoff while a ring change refuses its writes (consumers/loop.py: from 0.1 s,
# doubling, at most 5 s), in virtual seconds; and how many such retries make a writer stuck.
BACKOFF_S = (0.1, 5.0)
RING_ATTEMPTS = 40
# Actors that apply batches (consumers): stalls strike them, and cuts mostly.
WRITERS = ("graph", "fanout", "zombie", "replay")


@dataclass(frozen=True, slots=True)
class Failure:
    """One broken invariant: ``kind`` names the invariant, ``suspect`` the adapter's guess of
    the mechanism (read off the trace; empty when it has none)."""

    kind: str
    list_id: ListId | None
    member: str
    detail: str
    suspect: str = ""

    def __str__(self) -> str:
        where = f"{self.list_id[0]}:{self.list_id[1]} " if self.list_id else ""
        guess = f"  [suspect: {self.suspect}]" if self.suspect else ""
        return f"{self.kind}: {where}{self.member} {self.detail}{guess}"


@dataclass(slots=True)
class Delivery:
    """One batch delivered to a writer: from the step its first store call could take (its
    store-only step first, for a crash) to the step after its apply returned (None: never),
    when the consumer would commit its offsets."""

    events: tuple[Event, ...]
    began: int
    ended: int | None = None


@dataclass(frozen=True, slots=True)
class Read:
    """What a reader's ``read_many`` answered, the steps it spanned, and the step at which it
    first asked each cache server and the store (``asked``, by server name and ``store``)."""

    actor: str
    began: int
    ended: int
    asked: dict[str, int]
    lists: dict[ListId, frozenset[str]]

    def since(self, servers: set[str]) -> int:
        """The first step at which a source a list may be answered from was asked: its
        servers (a request may wait long after the lease that placed it was checked, and the
        server runs it when it comes) or the store; ``began`` if none was."""
        asked = [at for source, at in self.asked.items() if source in servers or source == "store"]
        return min(asked, default=self.began)


@dataclass(slots=True)
class Schedule:
    """Everything one seed drew, and what happened."""

    scenario: str
    seed: int
    knobs: adapter.Knobs
    strategy: str = ""
    events: list[Event] = field(default_factory=list)
    setup: int = 0  # events applied before the actors start
    actors: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    faults: str = ""  # the shares of cache-server faults and ring changes, as variables
    deliveries: list[Delivery] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.scenario}:{self.seed}"

    def report(self, limit: int = 400) -> str:
        lines = [
            f"== schedule {self.name} (strategy {self.strategy}, {len(self.steps)} steps) ==",
            f"replay: {self.faults}FANOUT_EXPLORE_SEED={self.name} .venv/bin/python -m pytest "
            "tests/explore -k replay -s",
            f"knobs: {self.knobs}",
            f"setup events: {' '.join(map(str, self.events[: self.setup]))}",
            f"live events:  {' '.join(map(str, self.events[self.setup :]))}",
            f"actors: {', '.join(self.actors)}",
            "failures:",
            *(f"  {f}" for f in self.failures),
            "trace:",
        ]
        shown = self.trace if len(self.trace) <= limit else self.trace[-limit:]
        if len(shown) < len(self.trace):
            lines.append(f"  ... {len(self.trace) - len(shown)} earlier steps left out")
        lines += [f"  {t}" for t in shown]
        return "\n".join(lines)


# -- workloads -----------------------------------------------------------------------------------


class Log:
    """An event log over ``partitions`` partitions, keyed as the project keys them (follows by
    followee, removals by user, posts by author). Event times increase within a partition and
    never repeat across partitions: the same-millisecond hole is documented, not explored."""

    def __init__(self, rng: random.Random, users: Sequence[str], partitions: int) -> None:
        self.rng = rng
        self.users = list(users)
        self.partitions = partitions
        self.events: list[Event] = []
        self._offsets = [0] * partitions
        self._tick = 100
        # Producers' clocks disagree: a partition's events may be stamped a few events older
        # than those of another, so a late-applied follow can be older than a removal.
        self._skew = [rng.choice([0, 0, -2, -4]) for _ in range(partitions)]
        self._posts = 0
        self._pending: list[tuple[str, str]] = []  # deleted before they were published

    def partition_of(self, key: str) -> int:
        return log_partition(self.users, key, self.partitions)

    def add(self, kind: Kind, user: str, other: str = "") -> Event:
        key = other if kind in ("follow", "unfollow") else user
        p = self.partition_of(key)
        self._tick += self.rng.randint(1, 2)
        ts = 10 * (self._tick + self._skew[p]) + p  # unique: no two events share a millisecond
        event = Event(kind, user, other, ts, p, self._offsets[p])
        self._offsets[p] += 1
        self.events.append(event)
        return event

    def post(self, author: str, post_id: str | None = None) -> Event:
        """A new post, or (``post_id``) a post id published again."""
        if post_id is None:
            self._posts += 1
            post_id = f"p{self._posts}"
        return self.add("post", author, post_id)

    def post_or_delete(self, authors: Sequence[str], deletions: float) -> Event:
        """A new post or, with probability ``deletions``, a deletion: mostly of one of the newest
        live posts (those a capped timeline shows), else of a post not published yet (its
        ``post`` comes at a later call: a deletion that arrives first), or a deleted post's id
        published again. A post deleted ahead is published at the next call, half the time."""
        rng = self.rng
        if self._pending and rng.random() < 0.5:
            return self.post(*self._pending.pop(0))
        if rng.random() >= deletions:
            return self.post(rng.choice(authors))
        model = GraphModel(self.events)
        live = [p for p in model.posts if p not in model.deleted]
        r = rng.random()
        if r < 0.6 and live:
            return self.add("deleted", *live[-1 - min(int(rng.expovariate(0.7)), len(live) - 1)])
        published = sorted(model.deleted & model.posts.keys())
        if r < 0.8 and published:
            return self.post(*rng.choice(published))
        self._posts += 1
        ahead = (rng.choice(authors), f"p{self._posts}")
        self._pending.append(ahead)
        return self.add("deleted", *ahead)

    def graph_event(
        self,
        followers: Sequence[str],
        followees: Sequence[str],
        unfollow: float = 0.3,
        removal: float = 0.0,
    ) -> Event:
        """A follow or unfollow that changes the graph as the events so far define it (a
        redundant one now and then: redeliveries are covered separately), or a removal."""
        rng = self.rng
        r = rng.random()
        if r < removal:
            return self.add("removed", rng.choice(sorted({*followers, *followees})))
        model = GraphModel(self.events)
        pairs = [(f, t) for f in followers for t in followees if f != t]
        active = [p for p in pairs if model.active(*p)]
        if r < removal + unfollow and active:
            # Half the time the newest follow: follow-then-unfollow of one edge in quick
            # succession is where a late token of either does harm.
            newest = [p for p in ((e.user, e.other) for e in reversed(self.events)) if p in active]
            follower, followee = newest[0] if rng.random() < 0.5 else rng.choice(active)
            return self.add("unfollow", follower, followee)
        fresh = [p for p in pairs if p not in active]
        follower, followee = rng.choice(fresh if fresh and rng.random() < 0.9 else pairs)
        return self.add("follow", follower, followee)


def _batches(rng: random.Random, events: Sequence[Event], most: int = 3) -> list[list[Event]]:
    out: list[list[Event]] = []
    i = 0
    while i < len(events):
        n = rng.randint(1, most)
        out.append(list(events[i : i + n]))
        i += n
    return out


@dataclass(slots=True)
class Workload:
    """A seed's event log and the mix of actors around it."""

    log: Log
    setup: int  # events applied (and lists warmed) before the actors start
    lists: list[ListId]  # every list the invariant checks
    warm: list[ListId]  # lists read, so cached, before the actors start
    crash: float = 0.15  # share of graph batches applied store-only, then delivered again
    twice: float = 0.1  # share of batches delivered twice
    replay: float = 0.3  # chance of a writer replaying an older slice of one partition
    zombie: float = 0.3  # chance of a revoked consumer still applying its partition's batches
    readers: int = 2
    timeline_readers: Sequence[str] = ()
    evictions: tuple[int, int] = (1, 3)
    restart: float = 0.15
    invalidate: float = 0.4
    lease_expiry: float = 0.4
    body_loss: float = 0.0  # chance of post bodies lost just before a deleting batch
    polls: tuple[int, int] = (5, 10)  # reads of the poller
    server_faults: float = 0.35  # chance of cache-server faults (``Actors.server_faults``)
    ring_changes: float = 0.15  # chance of a live ring change (``Actors.ring_change``)
    stalls: float = 0.2  # chance of processes stopped mid-exchange (``draw_stalls``)

    @property
    def live(self) -> list[Event]:
        return self.log.events[self.setup :]

    @property
    def horizon(self) -> int:
        """Roughly how many steps the writers take: passive actors act within it."""
        return 8 * len(self.live) + 20

    def hot(self) -> list[ListId]:
        """Lists the live events write to (readers favour them: that is where races are)."""
        hot: dict[ListId, None] = {}
        for e in self.live:
            if e.kind in ("follow", "unfollow"):
                hot.update(dict.fromkeys([("followers", e.other), ("following", e.user)]))
                if self.timeline_readers:
                    hot[("timeline", e.user)] = None
            elif e.kind == "removed":
                for other in self.log.events:
                    if e.user in (other.user, other.other) and other.kind not in POST_KINDS:
                        hot.update(dict.fromkeys(_graph_lists([other.user, other.other])))
        return [i for i in self.lists if i in hot] or self.lists


def log_partition(users: Sequence[str], key: str, partitions: int = 2) -> int:
    """``Log.partition_of`` before there is a log."""
    return users.index(key) % partitions


def _graph_lists(users: Sequence[str]) -> list[ListId]:
    return [(kind, u) for u in users for kind in ("followers", "following")]


def workload(scenario: str, rng: random.Random) -> Workload:
    """What a seed's actors will do, by scenario:

    - ``graph``: follows and unfollows among four users on two partitions, a rare removal,
      replays and zombie consumers, evictions;
    - ``removal``: removals often, and crashes between the store and the lists often;
    - ``hotlist``: one user follows and unfollows many, so its following list, written from
      both partitions, rolls over (tiny shards) and is compacted under concurrent writers
      while keys are evicted;
    - ``timeline``: readers follow and unfollow authors who post (and now and then delete
      posts); home timelines are read, regenerated and invalidated by the follows;
    - ``deletion``: the same with posts and deletions most of the time (deletions of the
      newest posts, deletions ahead of their posts, deleted ids published again, the posts
      topic replayed), timelines paged by more readers, and every post body lost a few steps
      before a deleting batch arrives."""
    if scenario in TIMELINE_SCENARIOS:
        # Every author has older posts, so a follow that a regenerated timeline misses shows.
        readers, authors = ["r0", "r1"], ["a0", "a1", "a2"]
        posts, deletions = (0.4, 0.2) if scenario == "timeline" else (0.7, 0.45)
        log = Log(rng, [*authors, *readers], 2)
        for author in authors * 2:
            log.post(author)
        # Deletions matter in timelines that hold the posts: there readers follow more.
        for _ in range(rng.randint(1, 3) if scenario == "timeline" else rng.randint(3, 5)):
            log.graph_event(readers, authors, unfollow=0.0)
        setup = len(log.events)
        for _ in range(rng.randint(6, 12)):
            if rng.random() < posts:
                log.post_or_delete(authors, deletions)
            else:
                log.graph_event(readers, authors, unfollow=0.35)
        timelines = [("timeline", r) for r in readers]
        lists = _graph_lists([*authors, *readers]) + timelines
        warm = [i for i in lists if rng.random() < (0.7 if scenario == "timeline" else 0.9)]
        return Workload(
            log,
            setup,
            lists,
            warm,
            crash=0.1,
            replay=0.2,
            zombie=0.2,
            readers=2 if scenario == "timeline" else 3,
            timeline_readers=readers,
            # Lost body items are filled by readers from the store: where a deletion can race
            # a fill (graph/timelines/post_bodies.py, the fence).
            evictions=(1, 3) if scenario == "timeline" else (2, 6),
            restart=0.15 if scenario == "timeline" else 0.3,
            body_loss=0.0 if scenario == "timeline" else 0.8,
            polls=(5, 10) if scenario == "timeline" else (10, 20),
        )
    if scenario == "hotlist":
        users = [f"u{i}" for i in range(10)]
        log = Log(rng, users, 2)
        for _ in range(rng.randint(6, 12)):
            log.graph_event(["u0"], users, unfollow=0.1)
        setup = len(log.events)
        for _ in range(rng.randint(8, 14)):
            log.graph_event(["u0", "u0", "u0", "u1"], users, unfollow=0.3)
        lists = _graph_lists(users)
        warm = [("following", "u0"), *(i for i in lists if rng.random() < 0.5)]
        return Workload(
            log, setup, lists, warm, crash=0.05, zombie=0.5, evictions=(3, 8), restart=0.1
        )
    if scenario == "removal":
        # One victim, followed and following on both partitions around its removal; its
        # edges are mostly new ones (an edge that exists is stamped by the removal instead).
        users = [f"u{i}" for i in range(6)]
        victim, others = users[0], users[1:]
        elsewhere = [u for u in others if log_partition(users, u) != log_partition(users, victim)]
        log = Log(rng, users, 2)
        for _ in range(rng.randint(2, 5)):
            log.graph_event(users, users, unfollow=0.2)
        setup = len(log.events)
        removals = set(rng.sample(range(5), rng.randint(1, 2)))
        for i in range(rng.randint(4, 7)):
            other = rng.choice(elsewhere if rng.random() < 0.8 else others)
            if i in removals:
                log.add("removed", victim)
            elif rng.random() < 0.65:
                # Mostly the victim following users of the other partition: a follow keyed to
                # the victim's own partition is ordered with its removal and cannot race it.
                pair = (victim, other) if rng.random() < 0.7 else (other, victim)
                log.add("unfollow" if rng.random() < 0.2 else "follow", *pair)
            else:
                log.graph_event(others, others, unfollow=0.3)
        lists = _graph_lists(users)
        warm = [i for i in lists if rng.random() < 0.75]
        return Workload(log, setup, lists, warm, crash=0.3, replay=0.2, zombie=0.2)
    users = [f"u{i}" for i in range(4)]
    log = Log(rng, users, 2)
    for _ in range(rng.randint(3, 6)):
        log.graph_event(users, users, unfollow=0.2)
    setup = len(log.events)
    for _ in range(rng.randint(6, 10)):
        log.graph_event(users, users, unfollow=0.3, removal=0.05)
    lists = _graph_lists(users)
    warm = [i for i in lists if rng.random() < 0.75]
    return Workload(log, setup, lists, warm, crash=0.1, replay=0.4, zombie=0.4, evictions=(1, 4))


# -- actors --------------------------------------------------------------------------------------


class Actors:
    """Builds the actors of one schedule. Each is a function run in its own thread that makes
    its own ``Process`` (its own store connection and list objects, like a separate consumer
    process) and then does its part, every cache or store call being a yield point."""

    def __init__(
        self, world: adapter.World, sched: Scheduler, rng: random.Random, run: Schedule
    ) -> None:
        self.world = world
        self.sched = sched
        self.rng = rng
        self.run = run
        self.ring_changes = False  # writers back off, as the consume loop does (``_deliver``)

    def spawn(
        self,
        name: str,
        body: Callable[[adapter.Process], None],
        wake_at: int = 0,
        patience: int = 0,
    ) -> None:
        seed = self.rng.getrandbits(32)
        world = self.world

        def main() -> None:
            proc = world.process(seed)
            try:
                body(proc)
            finally:
                proc.close()

        self.sched.spawn(name, main, wake_at, patience)
        self.run.actors.append(f"{name}@{wake_at}" if wake_at else name)

    def writer(
        self,
        name: str,
        batches: list[list[Event]],
        crash: float,
        twice: float,
        wake_at: int = 0,
        lose: float = 0.0,
    ) -> None:
        """A graph consumer on one partition (or a fan-out consumer): batches in order,
        some delivered twice, some crashing after the store step and then delivered again;
        a transient error retries the batch, as the consume loop does.

        ``lose``: the chance that every post body item is lost (memcached evicting a whole
        slab class of small items) a few steps before a batch that deletes posts arrives:
        pages read meanwhile fill the bodies from the store, and the deletion races those
        fills (the fence of graph/timelines/post_bodies.py)."""
        modes = [
            "crash" if r < crash else "twice" if r < crash + twice else "once"
            for r in (self.rng.random() for _ in batches)
        ]
        gaps = [0] * len(batches)  # steps between a loss and the batch; 0: no loss
        if lose:
            deleting = [any(e.kind == "deleted" for e in b) for b in batches]
            gaps = [
                self.rng.randint(4, 24) if d and self.rng.random() < lose else 0 for d in deleting
            ]

        def body(proc: adapter.Process) -> None:
            for batch, mode, gap in zip(batches, modes, gaps, strict=True):
                if gap:
                    step = self.sched.pause("fault.lose-bodies")
                    lost = self.world.lose_bodies()
                    if step is not None:
                        step.args, step.done = (lost,), True
                    self.sched.idle_until(len(self.sched.steps) + gap)
                delivery = self._delivery(batch)
                if mode == "crash" and any(e.kind not in POST_KINDS for e in batch):
                    self.sched.note("crash-after-store", (" ".join(map(str, batch)),))
                    proc.apply_store_only(batch)
                for again in range(2 if mode == "twice" else 1):
                    if again:
                        delivery = self._delivery(batch)
                    self._deliver(proc, batch)
                    delivery.ended = len(self.sched.steps)

        self.spawn(name, body, wake_at)

    def _delivery(self, batch: list[Event]) -> Delivery:
        delivery = Delivery(tuple(batch), len(self.sched.steps))
        self.run.deliveries.append(delivery)
        return delivery

    def _deliver(self, proc: adapter.Process, batch: list[Event]) -> None:
        """A batch applied until it succeeds, a transient error retrying it at once. While a
        ring change may refuse writes to keys it moves (for up to two holds), a retry waits
        first, as the consume loop's backoff does, and many more are allowed."""
        self.sched.note("batch", (" ".join(map(str, batch)),))
        self._retrying(functools.partial(proc.apply, batch))

    def _retrying(self, action: Callable[[], None]) -> None:
        attempts = RING_ATTEMPTS if self.ring_changes else WRITER_ATTEMPTS
        backoff, most = BACKOFF_S
        for attempt in range(attempts):
            try:
                action()
                return
            except Exception as exc:
                if not adapter.is_transient(exc) or attempt == attempts - 1:
                    raise
            if self.ring_changes:
                self.world.sleep(backoff)
                backoff = min(2 * backoff, most)

    def reader(self, name: str, reads: list[tuple[int, list[ListId]]]) -> None:
        """Reads lists (rebuilding absent ones, compacting dirty ones) at the given steps."""

        def body(proc: adapter.Process) -> None:
            for at, ids in reads:
                self.sched.idle_until(at)
                self.sched.note("read", tuple(f"{k}:{u}" for k, u in ids))
                began = len(self.sched.steps)
                self.world.watch(name)
                found = proc.read(ids)
                asked = self.world.consulted(name)
                self.run.reads.append(Read(name, began, len(self.sched.steps), asked, found))

        self.spawn(name, body, reads[0][0])

    def invalidator(self, ops: list[tuple[int, bool, list[ListId]]]) -> None:
        """``fanout rebuild-cache`` (force rebuild) or a bare invalidation of a few lists."""

        def body(proc: adapter.Process) -> None:
            for at, rebuild, ids in ops:
                self.sched.idle_until(at)
                name = "rebuild" if rebuild else "invalidate"
                self.sched.note(name, tuple(f"{k}:{u}" for k, u in ids))
                # ``fanout rebuild-cache`` fails while the lists move; the operator runs it again.
                self._retrying(functools.partial(proc.rebuild if rebuild else proc.invalidate, ids))

        self.spawn("invalidator", body, ops[0][0])

    def evictor(self, times: list[int]) -> None:
        """DELETEs a key the proxy has seen written, as memcached's LRU would. Mostly a key of
        the users the previous step touched (contended data, where an eviction can meet a
        race), recent keys first (work in flight: a lease, a new shard); now and then any."""
        rng = random.Random(self.rng.getrandbits(32))

        def pick(keys: list[bytes], focus: frozenset[str] | None) -> bytes:  # recent first
            if focus is not None and rng.random() < 0.7:
                near = [k for k in keys if self._meets(k, focus)]
                keys = near or keys
            if rng.random() < 0.2:
                return rng.choice(keys)
            return keys[min(int(rng.expovariate(0.5)), len(keys) - 1)]

        def body(proc: adapter.Process) -> None:
            for at in times:
                self.sched.idle_until(at)
                step = self.sched.pause("fault.evict")
                before = self.sched.previous
                focus = adapter.footprint(before.call, before.args) if before else None
                key = self.world.evict(functools.partial(pick, focus=focus))
                if step is not None:
                    step.args, step.done = (key,), True

        self.spawn("evictor", body, times[0])

    @staticmethod
    def _meets(key: bytes, focus: frozenset[str]) -> bool:
        owners = adapter.footprint("cache.delete_many", ([key],))
        return owners is not None and bool(owners & focus)

    def lease_clock(self, times: list[int]) -> None:
        """Makes every rebuild lease in the cache expire, as if its rebuild had outlived the
        lease TTL (a slow rebuild, a stalled process). An opportunist: it waits for a moment
        when a lease matters (under ``conflict``; else it strikes whenever chosen)."""

        def body(proc: adapter.Process) -> None:
            for at in times:
                self.sched.idle_until(at)
                step = self.sched.pause("fault.lease-expiry")
                expired = self.world.expire_leases()
                if step is not None:
                    step.args, step.done = (expired,), True

        self.spawn("leaseclock", body, times[0], patience=10**6)

    def server_faults(self, faults: list[ServerFault]) -> None:
        """Cache servers failing, one at a time (memcache/trust.py, docs/design/cache-failover.md):
        a process cut off a server (or the server down for every process) from one step to a
        later one, its requests refused, left unanswered (the server running them) or run late
        (when the cut heals), while the server keeps its items and the other processes go on
        using it: it comes back stale for the process that was cut off. Or a server
        restarted empty. Each process
        finds a server down and back by itself, when its retry interval has passed on the
        virtual clock."""

        def body(proc: adapter.Process) -> None:
            for fault in faults:
                self.sched.idle_until(fault.at)
                server = self.world.server_of(fault.server)
                if fault.kind == "restart":
                    step = self.sched.pause("fault.server-restart", (server,))
                    lost = self.world.restart_server(server)
                    if step is not None:
                        step.result, step.done = lost, True
                    continue
                step = self.sched.pause("fault.cut", (fault.target, server, fault.kind))
                self.world.cut(fault.target, server, fault.kind)
                if step is not None:
                    step.done = True
                self.sched.idle_until(fault.until)
                step = self.sched.pause("fault.heal", (fault.target, server))
                late = self.world.heal(fault.target, server)
                if step is not None:
                    step.result, step.done = late, True
            # A build that met its server unavailable is answered from the store and leaves
            # its claim, as a crashed builder would; its readers wait, then read the store,
            # until the claim's TTL ends it. Claims outlive any schedule here (adapter.LEASE_S):
            # that TTL passes now, a while after the last fault.
            self.sched.idle_until(len(self.sched.steps) + CLAIM_TTL_STEPS)
            step = self.sched.pause("fault.lease-expiry")
            expired = self.world.expire_leases()
            if step is not None:
                step.args, step.done = (expired,), True

        self.spawn("servers", body, faults[0].at)

    def ring_change(self, at: int, rings: Sequence[tuple[str, ...]]) -> None:
        """The operator's ``fanout ring change`` (memcache/ring_change.py) at step ``at``, to
        each ring of ``rings`` in turn, back to back: each change begins as soon as the one
        before returned (its last hold over). See ``ring_plan`` for what is drawn. Every
        process re-reads the record once per ``Knobs.ring_lease_s``, so each changes state at
        its own moment; a hold is spent as steps the others take, and whatever of it they
        leave is slept (the processes' leases run out as it passes)."""
        world = self.world
        first = world.ring.record.servers
        self.ring_changes = True

        def body(proc: adapter.Process) -> None:
            hold_for = hold_s(world.knobs.ring_lease_s, world.knobs.bounds)
            for servers in rings:
                change_ring(world.ring, first, servers, hold_for, sleep=world.pass_time)

        self.spawn("ring", body, at)
        self.run.actors[-1] += f" ({' → '.join(' '.join(r) for r in rings)})"

    def stalls(self, owner: str, stalls: list[adapter.Stall]) -> None:
        """Process ``owner`` stopped mid-exchange (``adapter.Stall``), each stall once, in turn."""
        self.world.stalls[owner] = stalls
        self.run.actors.append(f"stalls of {owner}: {'; '.join(map(str, stalls))}")

    def restarter(self, at: int, half: int) -> None:
        def body(proc: adapter.Process) -> None:
            step = self.sched.pause("fault.restart", (half,))
            lost = self.world.restart(half)
            if step is not None:
                step.result, step.done = lost, True

        self.spawn("restart", body, at)


@dataclass(frozen=True, slots=True)
class ServerFault:
    """One cache-server fault: ``kind`` a cut (``adapter.CUT_MODES``) of ``target`` (an
    actor, or ``*`` for all) off server ``server`` from step ``at`` to step ``until``, or
    ``restart``: the server restarted empty at ``at``."""

    kind: str
    at: int
    until: int
    server: int | ListId  # a server's index, or the list whose head's server it is
    target: str = ""


def server_faults(
    rng: random.Random,
    horizon: int,
    processes: Sequence[str],
    hot: Sequence[ListId],
    hold: float,
) -> list[ServerFault]:
    """One to three faults, one after the other.
    Mostly the server of a list the live events write to, and a writer cut off it: that is
    where an append is missed and the server comes back stale for a list others read. Cuts
    last 5 to 200 steps: some outlast a lease (100 steps with the default settings), some the
    retry interval, some end before the process cut off even noticed; one in four lasts one
    to two holds (``hold`` seconds: a ring change's wait, longer than a lease), and a server
    hung that long (every process cut off it, its requests run late) resumes after a ring
    change or a revocation has passed it by."""
    faults = []
    at = rng.randrange(5, max(6, horizon // 2))
    writers = [p for p in processes if p.startswith(WRITERS)]
    long = math.ceil(hold / adapter.STEP_S)
    for _ in range(rng.randint(1, 3)):
        server: int | ListId = rng.choice(hot) if rng.random() < 0.7 else rng.randrange(3)
        if rng.random() < 0.2:
            faults.append(ServerFault("restart", at, at, server))
            at += rng.randint(5, 60)
            continue
        r = rng.random()
        if r < 0.25 or not processes:
            target = "*"
        elif r < 0.75 and writers:
            target = rng.choice(writers)
        else:
            target = rng.choice(processes)
        until = at + (rng.randint(long, 2 * long) if rng.random() < 0.25 else rng.randint(5, 200))
        faults.append(ServerFault(rng.choice(adapter.CUT_MODES), at, until, server, target))
        at = until + rng.randint(1, 60)
    return faults


def ring_plan(rng: random.Random, servers: Sequence[str]) -> list[tuple[str, ...]]:
    """The rings of one to three ring changes made back to back, from the first ring
    (``s0``-``s2``): each adds or removes one server or, half the time, two at once (3→5,
    5→3), as far as the servers outside the ring and the floor of three allow. A server that
    leaves may be one of the first (replaced) or one
    added before (a reversal); one that joins may be one that left before (its copies from
    then are stale). The ring never has fewer than three servers, so a server fault beside
    it stays within what failover promises (docs/design/cache-failover.md)."""
    ring = set(servers[: adapter.FIRST_RING])
    rings: list[tuple[str, ...]] = []
    for _ in range(rng.choice([1, 2, 2, 3])):
        outside = sorted(set(servers) - ring)
        spare = len(ring) - adapter.FIRST_RING
        n = rng.choice([1, 2])
        if outside and (not spare or rng.random() < 0.5):
            ring |= set(rng.sample(outside, min(n, len(outside))))
        else:
            ring -= set(rng.sample(sorted(ring), min(n, spare)))
        rings.append(tuple(sorted(ring)))
    return rings


def draw_stalls(
    rng: random.Random, hold: float, others: Sequence[str], points: Sequence[str]
) -> list[adapter.Stall]:
    """One or two stalls of one process (``adapter.Stall``) at ``points``: stopped for a while
    (up to two holds, ``hold`` seconds each, so a lease, a revocation's wait, a ring change's
    step pass meanwhile) or not at all, and in most cases with a cut of the server its request
    goes to: its own (a writer's request fails where no later round retries it), everyone's
    (the server down or hung while it is stopped), every other process's, or a writer's of
    ``others`` (who revoke the server's epoch while it is stopped)."""
    stalls = []
    for _ in range(rng.randint(1, 2)):
        cut = None
        if rng.random() < 0.6:
            cut = rng.choice([adapter.SELF, adapter.SELF, "*", adapter.OTHERS, *others])
        # Not stopped at all only with a cut: then the stall is the fault at that request.
        stopped = cut is None or rng.random() < 0.7
        seconds = rng.choice([rng.uniform(0.2, 1.0), rng.uniform(1.0, 2.0)]) * hold
        stalls.append(
            adapter.Stall(
                rng.choice(points),
                # A read's later requests are its shards', after its heads' (one per server).
                rng.randrange(6) if "read" in points else rng.choice([0, 0, 1, 2]),
                rng.choice(["send", "receive"]),
                seconds if stopped else 0.0,
                cut,
                rng.choice(adapter.CUT_MODES),
                rng.randint(5, math.ceil(2 * hold / adapter.STEP_S)),
            )
        )
    return stalls


def replay(
    actors: Actors, load: Workload, rng: random.Random, name: str, topic: Callable[[Event], bool]
) -> None:
    """A writer replaying one partition of a topic (the events ``topic`` selects) from an old
    offset to somewhere in the live part, over the live consumers."""
    p = rng.randrange(load.log.partitions)
    part = [e for e in load.log.events if e.partition == p and topic(e)]
    old = sum(1 for e in part if e not in load.live)
    if len(part) >= 2:
        start = rng.randrange(min(old + 1, len(part) - 1))
        end = rng.randint(start + 2, len(part))
        replayed = _batches(rng, part[start:end])
        actors.writer(name, replayed, 0.0, 0.0, wake_at=rng.randrange(load.horizon // 3))


def plan(load: Workload, actors: Actors, rng: random.Random) -> None:
    """The actors of one schedule, drawn from its workload."""
    log, horizon = load.log, load.horizon
    writers: dict[int, list[list[Event]]] = {}
    for p in range(log.partitions):
        mine = [e for e in load.live if e.partition == p and e.kind not in POST_KINDS]
        if mine:
            writers[p] = _batches(rng, mine)
            actors.writer(f"graph{p}", writers[p], load.crash, load.twice)
    posts = [e for e in load.live if e.kind in POST_KINDS]
    if posts:
        actors.writer("fanout", _batches(rng, posts, 2), 0.0, load.twice, lose=load.body_loss)
    if writers and rng.random() < load.zombie:  # still applying the batches it had
        p = rng.choice(sorted(writers))
        batches = writers[p][rng.randrange(len(writers[p])) :]
        actors.writer("zombie", batches, 0.0, 0.0, wake_at=rng.randrange(horizon // 4))
    if rng.random() < load.replay:
        replay(actors, load, rng, "replay", lambda e: e.kind not in POST_KINDS)
    if posts and rng.random() < load.replay:  # ``fanout replay posts`` over the live fan-out
        replay(actors, load, rng, "replay-posts", lambda e: e.kind in POST_KINDS)
    hot = load.hot()
    timelines = [("timeline", u) for u in load.timeline_readers]
    for i in range(load.readers):
        reads = []
        if i == 0:  # a poller: the same few hot lists again and again, as a fan-out reads
            # its authors' follower lists and a home page its timeline
            ids = rng.sample(hot, min(len(hot), rng.randint(1, 2)))
            ids += [t for t in rng.sample(timelines, min(1, len(timelines))) if t not in ids]
            reads = [(rng.randrange(horizon), ids) for _ in range(rng.randint(*load.polls))]
        for _ in range(rng.randint(2, 5) if i else 0):  # a browser: anything, now and then
            pool = hot if rng.random() < 0.7 else load.lists
            ids = rng.sample(pool, min(len(pool), rng.randint(1, 3)))
            ids += [t for t in timelines if rng.random() < 0.5]
            reads.append((rng.randrange(horizon), ids))
        actors.reader(f"reader{i}", sorted(reads))
    if rng.random() < load.invalidate:
        ops = [
            (rng.randrange(horizon), rng.random() < 0.5, rng.sample(hot, min(2, len(hot))))
            for _ in range(rng.randint(1, 2))
        ]
        actors.invalidator(sorted(ops))
    low, high = load.evictions
    if rng.random() < 0.75:
        actors.evictor(sorted(rng.randrange(5, horizon) for _ in range(rng.randint(low, high))))
    if rng.random() < load.restart:
        actors.restarter(rng.randrange(5, horizon), rng.randrange(2))
    if rng.random() < load.lease_expiry:
        actors.lease_clock(sorted(rng.randrange(5, horizon) for _ in range(rng.randint(1, 4))))
    processes = [a.partition("@")[0] for a in actors.run.actors]
    processes = [a for a in processes if a not in PASSIVE]
    knobs = actors.world.knobs
    hold = hold_s(knobs.ring_lease_s, knobs.bounds)
    if rng.random() < load.server_faults:  # drawn last: the other actors are as without it
        actors.server_faults(server_faults(rng, horizon, processes, hot, hold))
    if rng.random() < load.ring_changes:  # drawn after the rest, for the same reason
        at = rng.randrange(5, max(6, horizon // 2))
        actors.ring_change(at, ring_plan(rng, actors.world.servers))
    if rng.random() < load.stalls:  # drawn after the rest, for the same reason
        consumers = [a for a in processes if a.startswith(WRITERS)]
        for owner in rng.sample(consumers, min(len(consumers), rng.randint(1, 2))):
            others = [c for c in consumers if c != owner]
            actors.stalls(owner, draw_stalls(rng, hold, others, adapter.WRITE_POINTS))
        readers = [a for a in processes if a.startswith("reader")]
        if readers and rng.random() < 0.5:  # a read answered after its lease ran out
            actors.stalls(rng.choice(readers), draw_stalls(rng, hold, consumers, ("read",)))


# -- one schedule --------------------------------------------------------------------------------


def run_schedule(
    cluster: MemcacheCluster,
    workdir: Path,
    scenario: str,
    seed: int,
    strategy: str | None = None,
    crashes: bool = True,
    server_faults: float | None = None,
    ring_changes: float | None = None,
    stalls: float | None = None,
) -> Schedule:
    """Draw, run and check one schedule. Deterministic in (scenario, seed, strategy,
    crashes, server_faults, ring_changes, stalls); ``crashes=False`` leaves out crashes
    between a batch's store and list steps (the one fault that breaks a list even without
    concurrency); ``server_faults`` is the chance of cache-server faults (default: the
    scenario's, or ``FANOUT_EXPLORE_SERVER_FAULTS``), ``ring_changes`` that of a live ring
    change (or ``FANOUT_EXPLORE_RING_CHANGES``), ``stalls`` that of writers stopped
    mid-batch (or ``FANOUT_EXPLORE_STALLS``)."""
    rng = random.Random(f"{scenario}:{seed}")  # str seeds hash with sha512: stable everywhere
    run = Schedule(scenario, seed, knobs(scenario, rng))
    load = workload(scenario, rng)
    if not crashes:
        load.crash = 0.0
    share = (
        os.environ.get("FANOUT_EXPLORE_SERVER_FAULTS") if server_faults is None else server_faults
    )
    if share is not None:
        load.server_faults = float(share)
    ring = os.environ.get("FANOUT_EXPLORE_RING_CHANGES") if ring_changes is None else ring_changes
    if ring is not None:
        load.ring_changes = float(ring)
    stalled = os.environ.get("FANOUT_EXPLORE_STALLS") if stalls is None else stalls
    if stalled is not None:
        load.stalls = float(stalled)
    run.faults = (
        f"FANOUT_EXPLORE_SERVER_FAULTS={load.server_faults} "
        f"FANOUT_EXPLORE_RING_CHANGES={load.ring_changes} "
        f"FANOUT_EXPLORE_STALLS={load.stalls} "
    )
    run.events, run.setup = load.log.events, load.setup
    db = workdir / f"{scenario}-{seed}.db"
    for stale in workdir.glob(f"{db.name}*"):
        stale.unlink()
    world = adapter.World(cluster, db, f"x{seed}", run.knobs)
    sched = Scheduler(
        random.Random(rng.getrandbits(64)),
        strategy=strategy,
        is_read=adapter.is_read,
        is_write=adapter.is_write,
        footprint=world.footprint,
    )
    run.strategy = sched.strategy
    world.scheduler = sched  # the schedule's cache calls go through it from now on
    with contextlib.closing(world):
        setup = world.process(seed=1, scheduled=False)
        try:
            for batch in _batches(rng, run.events[: run.setup]):
                setup.apply(batch)
            setup.read(load.warm)
        finally:
            setup.close()
        plan(load, Actors(world, sched, rng, run), rng)
        try:
            sched.run()
        except Hang as exc:
            run.failures.append(Failure("hang", None, "", str(exc)))
        run.steps = sched.steps
        run.trace = [f"{s.index:4} {s.actor:<11} {world.describe(s)}" for s in sched.steps]
        if sched.aborted and not run.failures:
            run.failures.append(Failure("step_limit", None, "", f"{len(sched.steps)} steps"))
        for name, error in sched.errors():
            if not isinstance(error, Aborted):
                detail = f"{name}: {type(error).__name__}: {error}"
                run.failures.append(Failure("actor_error", None, "", detail))
        if not run.failures:
            run.failures += check(world, load, run)
        else:  # a stuck or crashed actor: the forensics may still name the mechanism
            run.failures = [
                Failure(f.kind, f.list_id, f.member, f.detail, world.suspect(run.steps, [], f))
                for f in run.failures
            ]
    return run


def knobs(scenario: str, rng: random.Random) -> adapter.Knobs:
    """The product's settings for one schedule, drawn within what cli/settings.py allows
    (shard sizes excepted: hot lists get shards of a few tokens, below the allowed 256 bytes,
    so that rollovers race each other), defaults included: compaction at every dead token or
    never, at every write or none; failover leases, retries and timeouts shorter and longer
    than the defaults (a shorter timeout makes a shorter hold); timelines of one entry."""
    return adapter.Knobs(
        shard_bytes=rng.choice([16, 24, 32] if scenario == "hotlist" else [64, 96, 128, 256]),
        dirty_min=rng.choice([0, 1, 2, 3, 4, 64]),
        dirty_ratio=rng.choice([0.1, 0.3, 0.5, 1.0]),
        compact_write_prob=rng.choice([0.0, 0.01, 0.1, 0.2, 1.0]),
        # Timelines capped to a few entries, most of the time: trims then race deliveries that
        # a replay, a zombie or a redelivery brings late (posts older than the trim).
        cap=rng.choice([1, 2, 3, 4, 800]) if scenario in TIMELINE_SCENARIOS else 800,
        ring_lease_s=rng.choice([1.0, 2.0, 2.0, 3.0]),
        retry_s=rng.choice([0.5, 2.0, 2.0, 5.0]),
        timeout_s=rng.choice([0.5, 1.0, 1.0, 2.0]),
        celebrity_cache_s=rng.choice([60, 120, adapter.LEASE_S]),
    )


def check(world: adapter.World, load: Workload, run: Schedule) -> list[Failure]:
    """After quiescence: one read of every follower/following list equals the store; every
    way of reading a timeline shows what the model says; the store equals the model."""
    failures: list[Failure] = []
    for list_id, cached, stored in world.observe(load.lists):
        for member in sorted(cached - stored):
            failures.append(Failure("list_extra", list_id, member, "cached, not in store"))
        for member in sorted(stored - cached):
            failures.append(Failure("list_missing", list_id, member, "in store, not cached"))
    model = GraphModel(run.events)
    for list_id, reads, regenerated in world.observe_timelines(load.lists):
        newest = model.timeline(list_id[1], world.knobs.cap)
        for how, shown in reads:
            failures += timeline_failures(list_id, how, shown, newest, model.deleted)
        for entry in sorted(set(regenerated) ^ set(newest)):
            detail = "regenerated, events say not shown" if entry in regenerated else "store lacks"
            failures.append(Failure("store_vs_model", list_id, _member(entry), detail))
    for list_id, stored in world.stored(load.lists).items():
        expected = model.members(list_id)
        for member in sorted(stored ^ expected):
            detail = "store active, events say inactive" if member in stored else "store lacks"
            failures.append(Failure("store_vs_model", list_id, member, detail))
    failures += stale_reads(world, run)
    return [
        Failure(f.kind, f.list_id, f.member, f.detail, world.suspect(run.steps, run.events, f))
        for f in failures
    ]


def stale_reads(world: adapter.World, run: Schedule) -> list[Failure]:
    """Reads during the run: once a batch is committed (its apply returned), no process
    serves an item that missed it, so a read whose requests were all sent later must show
    it, even one that began (and placed its requests under a lease) before. For each
    follower/following list a reader read, every edge that no batch in flight while the read
    ran touches (a follow or unfollow of it, a removal of either user; replays, zombies and
    redeliveries count, and a crashed batch is in flight until its redelivery returns) must be
    as the batches committed before the read first asked a source of the list say (its
    servers or the store: ``Read.since``; ``read_stale``); an edge some batch in flight
    touches may be either way."""
    users = sorted({e.user for e in run.events} | {e.other for e in run.events} - {""})
    setup = run.events[: run.setup]
    failures = []
    for read in run.reads:
        for list_id, members in read.lists.items():
            since = read.since(world.places(list_id))
            done = [
                *setup,
                *(
                    e
                    for d in run.deliveries
                    if d.ended is not None and d.ended <= since
                    for e in d.events
                ),
            ]
            flying = [
                e
                for d in run.deliveries
                if d.began < read.ended and (d.ended is None or d.ended > since)
                for e in d.events
                if e.kind not in POST_KINDS
            ]
            model = GraphModel(done)
            kind, user = list_id
            for other in users:
                edge = (other, user) if kind == "followers" else (user, other)
                if other == user or any(_touches(e, edge) for e in flying):
                    continue
                if (other in members) != model.active(*edge):
                    shown = "shown" if other in members else "not shown"
                    detail = (
                        f"{shown} by {read.actor}'s read at steps {read.began}-{read.ended} "
                        f"(asked from {since}); the batches committed before say otherwise"
                    )
                    failures.append(Failure("read_stale", list_id, other, detail))
    return failures


def _touches(event: Event, edge: tuple[str, str]) -> bool:
    if event.kind == "removed":
        return event.user in edge
    return (event.user, event.other) == edge


def timeline_failures(
    list_id: ListId,
    how: str,
    shown: Sequence[Entry],
    expected: Sequence[Entry],
    deleted: set[tuple[str, str]],
) -> list[Failure]:
    """One way of reading a timeline against the model. A deleted post shown is a failure of
    its own (``deleted_shown``); a post shown that the model does not expect, or expected and
    not shown (a page cut short, a cap that counted deleted posts), and the right entries in
    another order or twice, are the others."""
    failures = []
    for entry in shown:
        if entry[1:] in deleted:
            failures.append(Failure("deleted_shown", list_id, _member(entry), f"by {how}"))
        elif entry not in expected:
            failures.append(Failure("timeline_extra", list_id, _member(entry), f"by {how}"))
    for entry in expected:
        if entry not in shown:
            detail = f"not shown by {how} ({len(shown)} of {len(expected)} entries)"
            failures.append(Failure("timeline_missing", list_id, _member(entry), detail))
    if not failures and list(shown) != list(expected):
        # The first entry out of place, or the last one (shown twice)
        first = next((a for a, b in zip(shown, expected, strict=False) if a != b), shown[-1])
        failures.append(Failure("timeline_order", list_id, _member(first), f"by {how}: {shown}"))
    return failures


def _member(entry: Entry) -> str:
    return "!".join(map(str, entry))


# -- many schedules ------------------------------------------------------------------------------


@dataclass(slots=True)
class Report:
    runs: int = 0
    failed: list[Schedule] = field(default_factory=list)
    kinds: Counter[str] = field(default_factory=Counter)
    suspects: Counter[str] = field(default_factory=Counter)
    first: dict[str, tuple[str, int]] = field(default_factory=dict)  # suspect: (seed, runs)
    per_scenario: Counter[str] = field(default_factory=Counter)
    failed_per_scenario: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)  # injected, by kind

    def add(self, run: Schedule) -> None:
        self.runs += 1
        self.per_scenario[run.scenario] += 1
        self.faults.update(s.call.removeprefix("fault.") for s in run.steps if is_fault(s))
        if not run.failures:
            return
        self.failed.append(run)
        self.failed_per_scenario[run.scenario] += 1
        self.kinds.update({f.kind for f in run.failures})
        suspects = {f.suspect or "?" for f in run.failures}
        self.suspects.update(suspects)
        for suspect in suspects:
            self.first.setdefault(suspect, (run.name, self.runs))

    def summary(self) -> str:
        kinds = " ".join(f"{k}={n}" for k, n in sorted(self.kinds.items())) or "-"
        suspects = " ".join(
            f"{s}={n}(first {self.first[s][0]} after {self.first[s][1]})"
            for s, n in sorted(self.suspects.items())
        )
        scenarios = " ".join(
            f"{s}={self.failed_per_scenario[s]}/{n}" for s, n in self.per_scenario.items()
        )
        faults = " ".join(f"{k}={n}" for k, n in sorted(self.faults.items())) or "-"
        return (
            f"explore: schedules={self.runs} failed={len(self.failed)} ({scenarios})"
            f" faults: {faults} kinds: {kinds} suspects: {suspects or '-'}"
        )


def is_fault(step: Step) -> bool:
    """A fault that was injected (a cut counts once, its heal apart)."""
    return step.call.startswith("fault.") and step.done and step.call != "fault.heal"


def schedules_per_scenario() -> int:
    return int(os.environ.get("FANOUT_EXPLORE_SCHEDULES", DEFAULT_SCHEDULES))


def explore(
    cluster: MemcacheCluster,
    scenarios: Sequence[str] = SCENARIOS,
    schedules: int | None = None,
    first_seed: int = 0,
    on_failure: Callable[[Schedule], None] | None = None,
) -> Report:
    """Run ``schedules`` seeds of each scenario, interleaved round-robin so a short run still
    covers every scenario."""
    count = schedules_per_scenario() if schedules is None else schedules
    report = Report()
    with tempfile.TemporaryDirectory(prefix="explore-") as tmp:
        for seed in range(first_seed, first_seed + count):
            for scenario in scenarios:
                run = run_schedule(cluster, Path(tmp), scenario, seed)
                report.add(run)
                if run.failures and on_failure is not None:
                    on_failure(run)
                for leftover in Path(tmp).glob(f"{scenario}-{seed}.db*"):
                    leftover.unlink()
    return report
