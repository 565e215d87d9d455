"""Which server holds each key, under a ring that grows and shrinks while every process runs.

The ring is a **record** every process reads from one shared place (``RingSource``; the edge
store in production): the servers of every version so far, and whether the newest version is
still being **moved to**. A process uses the record it read for ``lease_s``, then reads it again
(``RingView``); the operator's change (``fanout ring change``) waits a whole lease plus the
longest exchange between its steps, so at any moment the processes hold at most two
*neighbouring* states of the record:

1. **stable at R**: every key is on its owner in R;
2. **moving from R to S**: a key whose owner is the same in R and S is used as in both; a key
   whose owner differs (*moved*) is **unavailable** (as the keys of a down server are,
   memcache/trust.py): reads miss it and answer from the edge store, writes are not sent, and a
   writer that skipped it must not commit (``Cache.missed`` raises ``CacheUnavailable``, the
   batch is retried until the process reads the next state);
3. **stable at S**.

Why this is exact: in states 1 and 2 together, the moved keys' copies on R are read only by
processes in state 1, and written by them alone (state 2 writes none of them, and its writers
retry); the write a retrying writer has not made is one not yet applied, as under consumer lag.
In states 2 and 3 together, the copies on S are read and written by state 3 alone: they are
built through the lists' fence from the edge store, and a retried write of a state-2 writer
reaches them once its process moves on. States 1 and 3 never meet. No process ever needs to know
another's state, and no ordering of the processes' switches matters.

**Names.** A key's name on its server carries the first version of the unbroken run of versions
in which that server has owned it (``~{version}``, left out for a run as old as the history):
a key that moves away and back later is asked under a new name, so the copy it left behind,
which missed every write meanwhile, is never read again, and nothing needs flushing. Only the
moved keys go cold.

**Families.** Keys are placed by their *family*, which the client's user names (``Families``;
each key its own by default): the product's key space (graph/model/keys.py, ``KeySpace``)
places all the keys of one list (its head, shards and counters) by the list's key, so a list
moves whole, never half on a moved server and half not. Every process of a fleet must place
alike, so every process is given the same families (cli/wiring.py).

Placement is pymemcache ``HashClient``'s rendezvous hash (murmur3 seed 0 of ``{node}-{key}``,
the greatest wins, a tie to the greater node name), over the families.
"""

from __future__ import annotations

import enum
import json
import re
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import repeat
from operator import add, and_, eq, mod, mul
from typing import Protocol

import mmh3

from timeline_fanout.native_core import core

__all__ = [
    "MOVED",
    "EpochState",
    "Families",
    "Placement",
    "RecordChange",
    "RingRecord",
    "RingSource",
    "RingView",
    "ServerEpoch",
    "leading_parts",
    "leading_parts_reference",
    "place",
    "whole_keys",
    "winners",
    "winners_reference",
]

# Swaps of one change refused before ``RingView.update`` gives up: each refusal is another
# process's swap in between (a few per failure), so this many means it cannot match the record.
UPDATE_ATTEMPTS = 50
MOVED = -1  # the owner of a key that is moving between servers: no server may be used
NAME_MARK = b"~"  # outside the id alphabet, the namespace's and ``|``: names stay injective
# Placements a ring remembers: 1M keys of 19-digit ids cost ~110 MB (the keys kept alive and
# the dict), and cover the followers of the posts a fan-out process delivers at once.
PLACEMENTS_REMEMBERED = 1 << 20

# The key each key of a batch is placed by (its family), in order: keys of one family are
# always on one server, and move together.
Families = Callable[[Sequence[bytes]], list[bytes]]


def whole_keys(keys: Sequence[bytes]) -> list[bytes]:
    """Every key its own family: a client that knows nothing of its keys' grammar."""
    return list(keys)


# A key's family under ``leading_parts``, matched from its start: the first three parts of a
# key with two separators or more, else the part before its first separator (the whole key if
# it has none).
_LEADING_PARTS = re.compile(rb"[^|]*\|[^|]*\|[^|]*|[^|]*")


def leading_parts(keys: Sequence[bytes]) -> list[bytes]:
    """Each key's first three ``|``-separated parts (``{ns}|{kind}|{user}``: the product's key
    space, graph/model/keys.py, so a list's head, shards and counters, and every item named
    after a user, are on one server and move together). A key with one separator is placed by
    its first part, and one with none by itself. Every process must place every key alike, so
    this stays as keys have always been placed. By the native core where it runs (a key that
    is its own family comes back as itself); ``place`` finds owners under it without making
    the families at all."""
    if core is not None and (found := core.families(keys)) is not None:
        return found
    return leading_parts_reference(keys)


def leading_parts_reference(keys: Sequence[bytes]) -> list[bytes]:
    return list(map(re.Match.group, map(_LEADING_PARTS.match, keys)))  # type: ignore[arg-type]


class EpochState(enum.Enum):
    """Where a server stands in the record (docs/design/cache-register.md)."""

    UP = "up"  # read, filled and written under its epoch
    DOWN = "down"  # missed writes: nothing is sent to it, and a write skipped is not missed
    RETURNING = "returning"  # written under its next epoch (no ADD), read by writers only


@dataclass(frozen=True, slots=True)
class ServerEpoch:
    """A server's epoch and state. ``value`` is appended to every key sent to the server
    (``@{value}``; none for the empty value every server starts with): an epoch is never used
    again once left, so items a server kept through a failure are never asked for again."""

    value: str = ""
    state: EpochState = EpochState.UP

    @property
    def suffix(self) -> bytes:
        return b"@" + self.value.encode("ascii") if self.value else b""


UP_FROM_START = ServerEpoch()


@dataclass(frozen=True, slots=True)
class RingRecord:
    """Every version's servers, oldest first (version ``first`` + index), whether the newest
    is still being moved to, the epoch of every server whose epoch ever changed (the others
    are up under the empty epoch), and ``lease_s``, how long every process uses the record it
    read (0: not recorded yet; ``RingView`` records its own before it uses a key). The lease
    is the register's, not each process's setting: a writer's hold must outlast every lease a
    reader may hold, so the fleet agrees on one.

    Invariants: at least one version; each has at least one server; a moving record has at
    least two versions; ``epochs`` is sorted by server, so equal records have equal text."""

    rings: tuple[tuple[str, ...], ...]
    first: int = 1
    moving: bool = False
    epochs: tuple[tuple[str, ServerEpoch], ...] = ()
    lease_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.rings or not all(self.rings):
            raise ValueError("a ring record needs at least one version, each with a server")
        if self.moving and len(self.rings) < 2:
            raise ValueError("a ring can only move from an earlier version")
        if any(ring != tuple(sorted(set(ring))) for ring in self.rings):
            raise ValueError("each version's servers are sorted and distinct")
        if [name for name, _ in self.epochs] != sorted({name for name, _ in self.epochs}):
            raise ValueError("epochs are sorted by server, one each")

    @classmethod
    def of(cls, servers: Sequence[str], lease_s: float = 0.0) -> RingRecord:
        """A first version: ``servers`` (host:port) as they are configured."""
        return cls((tuple(sorted(servers)),), lease_s=lease_s)

    @property
    def version(self) -> int:
        return self.first + len(self.rings) - 1

    @property
    def servers(self) -> tuple[str, ...]:
        """The newest version's servers (the target while moving)."""
        return self.rings[-1]

    @property
    def used(self) -> tuple[str, ...]:
        """The servers a process in this state may use: while moving, those of both
        versions."""
        rings = self.rings[-2:] if self.moving else self.rings[-1:]
        return tuple(sorted({node for ring in rings for node in ring}))

    def epoch(self, server: str) -> ServerEpoch:
        for name, epoch in self.epochs:
            if name == server:
                return epoch
        return UP_FROM_START

    def returning_or_down(self) -> bool:
        """Whether some server is not ``UP`` (a step back is due once it answers)."""
        return any(epoch.state is not EpochState.UP for _, epoch in self.epochs)

    def with_epoch(self, server: str, epoch: ServerEpoch) -> RingRecord:
        """This record with ``server``'s epoch replaced."""
        epochs = dict(self.epochs)
        epochs[server] = epoch
        return replace(self, epochs=tuple(sorted(epochs.items())))

    def moved_to(self, servers: Sequence[str]) -> RingRecord:
        """The next version, ``servers``, being moved to. A live change keeps at least two
        servers on each side: one alone would leave every key moving, the whole cache read
        from the edge store for two holds."""
        target = tuple(sorted(set(servers)))
        if self.moving:
            raise ValueError(f"version {self.version} is still being moved to")
        if target == self.servers:
            raise ValueError("the ring already has exactly these servers")
        if len(target) < 2 or len(self.servers) < 2:
            raise ValueError("a live ring change needs two servers or more before and after")
        return replace(self, rings=(*self.rings, target), moving=True)

    def settled(self) -> RingRecord:
        return replace(self, moving=False)

    def with_lease(self, lease_s: float) -> RingRecord:
        """This record with ``lease_s`` recorded, if it has none yet (a recorded lease stays)."""
        return self if self.lease_s else replace(self, lease_s=lease_s)

    def to_json(self) -> str:
        epochs = {name: [e.value, e.state.value] for name, e in self.epochs}
        data: dict[str, object] = {"rings": self.rings, "first": self.first, "moving": self.moving}
        if epochs:
            data["epochs"] = epochs
        if self.lease_s:
            data["lease_s"] = self.lease_s
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> RingRecord:
        data = json.loads(text)
        rings = tuple(tuple(str(s) for s in ring) for ring in data["rings"])
        epochs = tuple(
            sorted(
                (str(name), ServerEpoch(str(value), EpochState(state)))
                for name, (value, state) in data.get("epochs", {}).items()
            )
        )
        lease_s = float(data.get("lease_s", 0.0))
        return cls(rings, int(data["first"]), bool(data["moving"]), epochs, lease_s)


RecordChange = Callable[[RingRecord], "RingRecord | None"]


class RingSource(Protocol):
    """The shared place the ring record lives in."""

    def read_ring(self) -> RingRecord | None:
        """The record, or None if none was ever written (the configured servers are used)."""
        ...

    def swap_ring(self, expected: RingRecord | None, record: RingRecord) -> bool:
        """Write ``record`` only if the stored record equals ``expected`` (None: there is
        none), atomically; whether it was written."""
        ...


class Placement:
    """Owners and names of keys under one ring record, as a process in its state uses them.

    ``nodes``: every server this state may use, sorted (an owner is an index into it, or
    ``MOVED``). ``renamed``: the keys placed so far whose name differs from the key. Both
    remembered per key: a fan-out places the same followers' timeline keys for every post of
    their followees, and a lookup (C level, a dict's ``get`` mapped over the keys) costs a
    tenth of placing a key again in Python. The native core places a key in less than that
    lookup (``winners``), so with it a record of one version, which names no key, remembers
    nothing and places every batch afresh."""

    def __init__(
        self,
        record: RingRecord,
        families: Families = whole_keys,
        remembered: int = PLACEMENTS_REMEMBERED,
    ) -> None:
        self.record = record
        self.families = families
        # The versions whose owners decide a name: all but the target while moving (a key
        # used while moving has the same owner in both).
        self._history = record.rings[:-1] if record.moving else record.rings
        used = record.rings[-2:] if record.moving else record.rings[-1:]
        self.nodes = sorted({node for ring in used for node in ring})
        self._index = {node: i for i, node in enumerate(self.nodes)}
        self._remembered = remembered
        self._afresh = core is not None and len(record.rings) == 1
        self._placed: dict[bytes, int] = {}
        self.renamed: dict[bytes, bytes] = {}
        # Placing past the bound forgets every name at once, and a placement is shared by the
        # threads of a process: a thread between its ``owners`` and its ``names`` must not
        # find its keys' names forgotten (it would send them under their plain names, to the
        # copies a move left behind). Forgetting and re-placing are done under this lock.
        self._lock = threading.Lock()

    def owners(self, keys: Sequence[bytes]) -> list[int]:
        """The index in ``nodes`` of each key's server, or ``MOVED``."""
        if self._afresh:
            return place(self.nodes, keys, self.families)
        placed = self._placed
        found = list(map(placed.get, keys))
        if None not in found:
            return found  # type: ignore[return-value]  # no None in it
        with self._lock:
            return self._owners_locked(keys)

    def _owners_locked(self, keys: Sequence[bytes]) -> list[int]:
        placed = self._placed
        found = list(map(placed.get, keys))
        if None not in found:
            return found  # type: ignore[return-value]  # no None in it
        if found.count(None) == len(found):  # none placed yet (a cold fan-out): all at once
            new = list(keys)
        else:
            new = [key for key, owner in zip(keys, found, strict=True) if owner is None]
        if len(placed) + len(new) > self._remembered:
            # The working set outgrew the bound: start again from this batch, all of it (a
            # name forgotten here would be sent as the key).
            placed.clear()
            self.renamed.clear()
            owners = self._place(list(keys))
            placed.update(zip(keys, owners, strict=True))
            return owners
        owners = self._place(new)
        placed.update(zip(new, owners, strict=True))
        if len(new) == len(keys):
            return owners
        fill = iter(owners)
        return [next(fill) if owner is None else owner for owner in found]

    def names(self, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        """The names of those of ``keys`` sent under another name. Keys forgotten since they
        were placed (another thread placed past the bound meanwhile) are placed again first,
        under the lock, so their names are never missing. A record of one version renames
        nothing: then no key is looked at (the fan-out's hot path)."""
        if len(self.record.rings) == 1:
            return {}
        with self._lock:
            if not all(map(self._placed.__contains__, keys)):
                self._owners_locked(keys)
            renamed = self.renamed
            return {key: renamed[key] for key in renamed.keys() & keys} if renamed else {}

    def _place(self, keys: list[bytes]) -> list[int]:
        """Owners at C level, one pass per version (a fan-out places every follower's
        timeline key): each version's owner of each family, then per key the run of versions
        its current owner has held it for, which names it."""
        if len(self.record.rings) == 1:  # one version: no history to walk, no names to mark
            return place(self.nodes, keys, self.families)
        by = self.families(keys)
        record = self.record
        now = _owned(record.servers, by)
        owners = list(map(self._index.__getitem__, now))
        if record.moving:  # owned elsewhere by the previous version: moving
            before = _owned(record.rings[-2], by)
            owners = [MOVED if a != b else o for a, b, o in zip(before, now, owners, strict=True)]
        # Per key, the first version of the run: walk back while each older version agrees.
        start = [len(self._history) - 1] * len(keys)
        same = [True] * len(keys)
        for version in range(len(self._history) - 2, -1, -1):
            older = _owned(self._history[version], by)
            same = list(map(and_, same, map(eq, older, now)))
            if not any(same):
                break
            start = [version if kept else s for kept, s in zip(same, start, strict=True)]
        marked = (
            (key, key + NAME_MARK + b"%x" % (record.first + run))
            for key, run, owner in zip(keys, start, owners, strict=True)
            if run and owner != MOVED
        )
        self.renamed.update(marked)
        return owners


def _owned(ring: Sequence[str], families: list[bytes]) -> list[str]:
    """Each family's owner in ``ring``, by name."""
    return list(map(ring.__getitem__, winners(ring, families)))


def place(ring: Sequence[str], keys: Sequence[bytes], families: Families) -> list[int]:
    """Each key's owner in ``ring`` (sorted) under ``families``, as its index there: under
    ``leading_parts`` the native core finds each key's family and its owner in one pass (a
    cold fan-out places a million keys); otherwise ``winners`` of the families."""
    if core is not None and families is leading_parts:
        prefixes = [node.encode("ascii") + b"-" for node in ring]
        if (found := core.place(prefixes, keys)) is not None:
            return found
    return winners(ring, families(keys))


def winners(ring: Sequence[str], families: list[bytes]) -> list[int]:
    """Each family's owner in ``ring`` (sorted), as its index there. The native core hashes
    the batch in one pass (a cold fan-out places a million keys); a batch that is no list of
    ``bytes`` is the reference's."""
    if core is not None:
        prefixes = [node.encode("ascii") + b"-" for node in ring]
        if (found := core.winners(prefixes, families)) is not None:
            return found
    return winners_reference(ring, families)


def winners_reference(ring: Sequence[str], families: list[bytes]) -> list[int]:
    """Each family's owner in ``ring`` (sorted), as its index there, for a whole batch at C
    level: ``score * count + rank``, so the max is the winner, a tie to the higher rank."""
    count = len(ring)
    if count == 1:
        return [0] * len(families)
    ranked = [
        map(
            add,
            map(mul, map(mmh3.mmh3_32_uintdigest, map(prefix.__add__, families)), repeat(count)),
            repeat(rank),
        )
        for rank, prefix in enumerate(node.encode("ascii") + b"-" for node in ring)
    ]
    return list(map(mod, map(max, *ranked), repeat(count)))


class RingView:
    """A process's view of the shared record: the record it read, used for ``lease_s`` after
    the read began, then read again (by a background thread before it runs out, once
    ``keep_renewed`` was called; else by the first use after it ran out). Without a source
    the record is this process's own: never read again, changed only by ``update``.

    Thread-safe: one thread reads or swaps the source at a time, the others wait for it; the
    record and placement are replaced whole, so a reader sees one or the other."""

    def __init__(
        self,
        record: RingRecord,
        source: RingSource | None = None,
        lease_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        families: Families = whole_keys,
    ) -> None:
        """``lease_s``: this process's setting, recorded in the shared record if it holds none
        yet; the record's own is used once recorded (``RingRecord.lease_s``). ``families``:
        how keys are grouped for placement (``Families``)."""
        self.source = source
        self._setting = lease_s
        self.clock = clock
        self._record = record
        self._placement = Placement(record, families)
        self._taken = float("-inf") if source is not None else float("inf")
        self._seen: dict[tuple[str, ServerEpoch], float] = {}
        self._lock = threading.RLock()
        self._flight_lock = threading.Lock()
        self._flight: threading.Event | None = None  # set once the read under way has ended
        self._renewer: threading.Thread | None = None

    @property
    def record(self) -> RingRecord:
        """The record last read (its lease may have run out); its epochs are the newest this
        process knows."""
        return self._record

    def current(self) -> Placement | None:
        """The placement under a live lease, or None when the lease ran out (a reader that
        must not block gives up; ``renewed`` reads the record again). A placement changes
        only with the servers (versions, moving): an epoch's change keeps its remembered
        keys."""
        if self.clock() - self._taken < self.lease_s:
            return self._placement
        return None

    def leased(self) -> RingRecord | None:
        """The record under a live lease (None when it ran out)."""
        return self._record if self.clock() - self._taken < self.lease_s else None

    @property
    def lease_s(self) -> float:
        """How long a record read is used: the one the shared record holds (every process
        uses the same, whatever its setting), this process's setting for its own record."""
        return self._record.lease_s or self._setting

    @property
    def stale_s(self) -> float:
        """How long another process may still use a record after it was replaced: a lease
        with a shared source; none without (this process's record is the only one, and every
        exchange checks it again once its replies are in)."""
        return self.lease_s if self.source is not None else 0.0

    def first_seen(self, server: str, epoch: ServerEpoch) -> float:
        """When this process first held a record giving ``server`` this epoch (after the read
        that brought it ended: never earlier than the swap that wrote it)."""
        return self._seen.get((server, epoch), self.clock())

    def value_first_seen(self, server: str, value: str) -> float:
        """When this process first held a record giving ``server`` the epoch ``value``, in any
        state (never earlier than the revocation that chose it)."""
        seen = list(self._seen.items())  # one C-level copy: another thread may add meanwhile
        found = [at for (name, e), at in seen if name == server and e.value == value]
        return min(found, default=self.clock())

    def renewed(self) -> Placement | None:
        """The placement, read again from the source if the lease ran out; None when the
        source cannot be read (no key may be used: this process cannot know which moved)."""
        if (placement := self.current()) is not None or self.source is None:
            return placement
        return self._read_shared(again=False)

    def _read_shared(self, again: bool) -> Placement | None:
        """One read of the source at a time: a thread that finds a read under way waits for
        it and takes its outcome (None if it gave no live lease: the place failed, or answered
        slower than a lease), so a slow register costs each call one read, not a queue of
        them. ``again``: read even if the lease is live (the renewal)."""
        with self._flight_lock:
            flight = self._flight
            leading = flight is None
            if flight is None:
                flight = self._flight = threading.Event()
        if not leading:
            flight.wait()
            return self.current()
        try:
            with self._lock:
                if not again and (placement := self.current()) is not None:
                    return placement
                return self._read()
        finally:
            with self._flight_lock:
                self._flight = None
            flight.set()

    def _read(self) -> Placement | None:
        assert self.source is not None
        taken = self.clock()
        try:
            record = self.source.read_ring()
            if record is None or not record.lease_s:
                record = self._recorded(record)
        except Exception:  # any failure of the shared place: no lease, so no key is used
            return None
        if record is None:
            return None
        self._adopt(record, taken)
        return self.current()  # None if the read took longer than a lease

    def _recorded(self, stored: RingRecord | None) -> RingRecord | None:
        """The stored record with a lease recorded: this process's setting, written by
        compare-and-set (no key is used under a record without one: a writer could not know
        how long a reader's lease on it lasts). None if another process's record without one
        stands in its way (a process of a version that does not record it)."""
        assert self.source is not None
        stamped = (stored or self._record).with_lease(self._setting)
        if self.source.swap_ring(stored, stamped):
            return stamped
        again = self.source.read_ring()
        return again if again is not None and again.lease_s else None

    def _adopt(self, record: RingRecord, taken: float) -> None:
        """``record``, known to be the stored one at some moment after ``taken``."""
        now = self.clock()
        for server, epoch in record.epochs:
            self._seen.setdefault((server, epoch), now)
        if record.rings != self._record.rings or record.moving != self._record.moving:
            self._placement = Placement(record, self._placement.families)
        self._record = record
        self._taken = max(self._taken, taken) if self.source is not None else self._taken

    def update(self, change: RecordChange) -> RingRecord | None:
        """The stored record after ``change``: applied to the stored record and swapped in by
        compare-and-set, again on the newest record as long as the swap is refused (another
        process swapped meanwhile); ``change`` answering None leaves the record as it is. None
        when the shared place cannot be read or written, or refuses every swap (a stored
        record this process cannot match: not one it wrote)."""
        with self._lock:
            for _ in range(UPDATE_ATTEMPTS):
                taken = self.clock()
                try:
                    stored = self.source.read_ring() if self.source is not None else self._record
                    base = stored or self._record
                    after = change(base)
                    if after is None and (base.lease_s or self.source is None):
                        self._adopt(base, taken)
                        return base
                    after = (after or base).with_lease(self._setting)
                    if self.source is None or self.source.swap_ring(stored, after):
                        self._adopt(after, taken)
                        return after
                except Exception:  # the shared place failed: nothing is known to be recorded
                    return None
            return None

    def keep_renewed(self) -> None:
        """Renews the lease from a background thread whenever half of it has passed, so that
        no request waits on the shared place in steady state (idempotent)."""
        if self.source is None or self._renewer is not None:
            return
        self._renewer = threading.Thread(
            target=_renew_loop, args=(weakref.ref(self),), name="ring-lease", daemon=True
        )
        self._renewer.start()


def _renew_loop(ref: weakref.ref[RingView]) -> None:
    """``keep_renewed``'s thread: holds its view only while renewing it, and ends once the view
    is gone (a process's clients closed and dropped)."""
    pause = 0.0
    while True:
        time.sleep(pause)
        view = ref()
        if view is None:
            return
        if view.clock() - view._taken >= view.lease_s / 2:
            read = view._read_shared(again=True)
        else:
            read = view._placement
        # Half a lease after the last read, or soon again if the shared place failed.
        due = view._taken + view.lease_s / 2 - view.clock()
        pause = view.lease_s / 10 if read is None else max(view.lease_s / 20, due)
        del view
