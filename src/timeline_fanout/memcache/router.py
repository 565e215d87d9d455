"""Where a key goes and under which epoch, and what a write that missed a server costs: the
clients' side of the register (docs/design/cache-register.md).

The router answers from the ring record under this process's lease (memcache/ring.py) and
from this process's reachability (memcache/trust.py): which server owns a key and under which
name (``split``), whether it may be read, how it may be written (``ServerUse``), and whether
replies read under a lease still hold once they are in (``outlived``). Both clients route
through it, by the same plan of each batch (memcache/exchange.py): the blocking one
(memcache/executor.py) and the event loop's (memcache/async_cluster.py), which uses only what
never waits (``now``, ``split``, ``use`` and ``outlived`` without renewal); they differ only in
their I/O.

For the blocking client it also keeps the ledger of exchanges left unanswered, from which
``missed`` judges a write a reader's answer made the writer skip, and makes the changes of the
record, each a compare-and-set:

- **revoke**: a server missed a write; its epoch goes ``DOWN`` under a new value, and the
  writer waits a lease period after it first saw that value (``hold``), so no lease taken
  before still reads the items that missed the write when the writer's batch commits;
- **advance**: a ``DOWN`` server that answers a probe goes ``RETURNING``; a lease period
  after a process first saw it ``RETURNING`` it goes ``UP``.

Invariant: no request is sent to a server except under a suffix ``use`` gave under the
lease the exchange began with, and no reply is used once the record gives that server another
suffix (``outlived``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from itertools import compress, repeat
from operator import eq
from typing import Any, NamedTuple, TypeVar

from timeline_fanout.memcache.ring import (
    MOVED,
    EpochState,
    Placement,
    RecordChange,
    RingRecord,
    ServerEpoch,
)
from timeline_fanout.memcache.trust import ServerTrust, ServerUse
from timeline_fanout.memcache.wire import CacheUnavailable, KeysMoving
from timeline_fanout.native_core import core

__all__ = ["Lease", "Route", "Router", "Split", "by_owner", "by_owner_reference", "sent"]

T = TypeVar("T")


class Lease(NamedTuple):
    """Where keys are, and the servers' epochs, both under one live lease on the record."""

    placement: Placement
    record: RingRecord


class Route(NamedTuple):
    """One server's share of a batch of keys: those keys as asked, and the entries of each
    column aligned with the keys that go with them."""

    node: str
    keys: list[bytes]
    columns: list[list[Any]]


class Split(NamedTuple):
    """A batch of keys placed: each server's ``routes`` (in ring order, the servers given
    none left out), the keys ``moving`` between servers (no server may be used for them:
    memcache/ring.py), and ``names``, the keys sent under another name than asked."""

    routes: list[Route]
    moving: list[bytes]
    names: dict[bytes, bytes]


def by_owner(owners: list[int], count: int, column: Sequence[T]) -> list[list[T]]:
    """``column`` split by ``owners`` (each entry's server, an index into the placement's
    ``nodes``) into ``count`` lists, each in the column's order; an entry owned by no index
    (``MOVED``) goes to none. The native core makes one pass where the reference makes one per
    server (a fan-out splits every follower's key)."""
    if core is not None and (split := core.by_owner(owners, count, column)) is not None:
        return split
    return by_owner_reference(owners, count, column)


def by_owner_reference(owners: list[int], count: int, column: Sequence[T]) -> list[list[T]]:
    """``by_owner`` in Python, at C level per server."""
    return [list(compress(column, map(eq, owners, repeat(at)))) for at in range(count)]


def sent(keys: list[bytes], names: Mapping[bytes, bytes], suffix: bytes = b"") -> list[bytes]:
    """``keys`` as sent to their server: under their names there (``Split.names``), with its
    epoch suffix."""
    named = [names.get(k, k) for k in keys] if names else keys
    return [key + suffix for key in named] if suffix else named


def _valid_suffix(record: RingRecord | None, node: str) -> bytes | None:
    """``node``'s key suffix under ``record`` (None: no lease, or its epoch is down)."""
    if record is None or (epoch := record.epoch(node)).state is EpochState.DOWN:
        return None
    return epoch.suffix


def _stepped(node: str, before: ServerEpoch, after: ServerEpoch) -> RecordChange:
    """A change of the record: ``node``'s epoch ``before`` becomes ``after`` (no change once
    the record has left ``before``)."""

    def change(stored: RingRecord) -> RingRecord | None:
        return stored.with_epoch(node, after) if stored.epoch(node) == before else None

    return change


def _revoked(revocations: Mapping[str, tuple[str, ServerEpoch]]) -> RecordChange:
    """Revocations, all in one change: each ``node: (value, revoked)`` goes ``revoked`` if it is
    still under the epoch ``value``, up or returning (a write under a returning epoch is missed
    by that epoch once it is up); no change once the record has left every ``value``."""

    def change(stored: RingRecord) -> RingRecord | None:
        after = stored
        for node, (value, revoked) in revocations.items():
            now = after.epoch(node)
            if now.value == value and now.state is not EpochState.DOWN:
                after = after.with_epoch(node, revoked)
        return None if after is stored else after

    return change


class Router:
    """One client's placement, epochs and ledger of unanswered exchanges. ``trust`` may be
    shared with the process's other clients; ``probe`` asks a server whether it answers (None:
    this client never probes; a due server is asked by its next request, and its failure marks
    it down); ``sleep`` is how this client waits (a hold, a list being built); ``brings_back``:
    whether this client makes ``advance``'s steps (a client that only injects faults does
    not)."""

    def __init__(
        self,
        trust: ServerTrust,
        probe: Callable[[str], bool] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        brings_back: bool = True,
    ) -> None:
        self.trust = trust
        self._probe_io = probe
        self._sleep = sleep
        self._brings_back = brings_back
        self._unanswered_seq = 0  # exchanges left unanswered, counted (``checkpoint``)
        # Per server, the count at its last unanswered exchange and the epoch it went under.
        self._unanswered_at: dict[str, tuple[int, ServerEpoch]] = {}
        # The count when a key was last answered as moving (memcache/ring.py): a writer that
        # read a moved list's head as missing under one ring state may reach ``missed`` under
        # the next, where the list is not moving any more (its lease ran out mid-write).
        self._moving_at = 0

    def placement(self) -> Placement | None:
        """Where keys are now (memcache/ring.py); None when this process cannot know (its
        ring lease ran out and the record cannot be read): then no key may be used."""
        view = self.trust.ring
        placement = view.renewed()
        if placement is not None and view.record.returning_or_down():
            self.advance()  # a step back may be due (probes back off); a probe takes time:
            placement = view.renewed()  # the lease is renewed again if it ran out meanwhile
        return placement

    def lease(self) -> Lease | None:
        """The placement and the epochs under the same live lease (None: no key is used)."""
        placement = self.placement()
        record = self.trust.ring.leased() if placement is not None else None
        return None if placement is None or record is None else Lease(placement, record)

    def now(self) -> Lease | None:
        """``lease`` without reading the record again or probing: for a caller that must never
        wait (the event loop). None once the lease ran out: the blocking clients renew it."""
        view = self.trust.ring
        placement, record = view.current(), view.leased()
        return None if placement is None or record is None else Lease(placement, record)

    def split(
        self,
        placement: Placement,
        keys: Sequence[bytes],
        columns: Sequence[Sequence[Any]] = (),
    ) -> Split:
        """``keys`` placed: each server's share (with the entries of ``columns``, aligned
        with the keys, that go with them), the keys moving, the keys renamed."""
        owners = placement.owners(keys)  # before ``names``: a key is named when placed
        names = placement.names(keys)
        moving = (
            [k for k, o in zip(keys, owners, strict=True) if o == MOVED] if MOVED in owners else []
        )
        count = len(placement.nodes)
        shares = [by_owner(owners, count, column) for column in (keys, *columns)]
        routes = [
            Route(node, mine, list(rest))
            for node, mine, *rest in zip(placement.nodes, *shares, strict=True)
            if mine
        ]
        return Split(routes, moving, names)

    def record(self) -> RingRecord | None:
        """The record under a live lease, read again if it ran out (a revocation's wait, a
        slow exchange); None when it cannot be read."""
        view = self.trust.ring
        record = view.leased()
        if record is None and self.placement() is not None:
            record = view.leased()
        return record

    def available(self, keys: Sequence[bytes]) -> list[bool]:
        """Per key, whether its server may be read now (up in the record under a live lease,
        answering) and it is not moving between servers; only the servers that own ``keys``
        are looked at."""
        lease = self.lease()
        if lease is None:
            return [False] * len(keys)
        owners = lease.placement.owners(keys)
        usable = {
            owner: self.use(lease.placement.nodes[owner], lease.record).readable
            for owner in set(owners)
            if owner != MOVED
        }
        return [owner != MOVED and usable[owner] for owner in owners]

    def server_for(self, key: bytes) -> str:
        """The server ``key`` is on (``ValueError`` while it moves)."""
        placement = self.placement()
        owner = MOVED if placement is None else placement.owners([key])[0]
        if placement is None or owner == MOVED:
            raise ValueError(f"{key!r} is moving between servers")
        return placement.nodes[owner]

    def use(self, node: str, record: RingRecord | None) -> ServerUse:
        """How ``node`` may be used under ``record``, probing it first if this process found
        it down and a probe is due (a server down in the record is probed by ``advance``)."""
        trust = self.trust
        if (
            self._probe_io is not None
            and record is not None
            and record.epoch(node).state is not EpochState.DOWN
            and trust.was_down(node)
            and not trust.is_down(node)
        ):
            self._probe(node)
        return trust.use(node, record)

    def _probe(self, node: str) -> bool:
        answers = self._probe_io is not None and self._probe_io(node)
        if answers:
            self.trust.mark_up(node)
        else:
            self.trust.mark_down(node)
        return answers

    # -- the ledger of unanswered exchanges ----------------------------------------------------

    def checkpoint(self) -> int:
        """A mark to pass to ``missed``: the exchanges left unanswered so far."""
        return self._unanswered_seq

    def unanswered(self, node: str, use: ServerUse) -> None:
        """An exchange with ``node`` under ``use`` was answered as a server holding nothing
        would: a writer's skip decided by it is missed by that server, unless ``use`` says a
        skip there is no missed write."""
        self._unanswered_seq += 1
        if use.skip_is_missed:
            self._unanswered_at[node] = (self._unanswered_seq, use.epoch)

    def moving(self) -> None:
        """Keys moving between servers were answered as missing (memcache/ring.py)."""
        self._moving_at = self._unanswered_seq = self._unanswered_seq + 1

    def missed(self, keys: Sequence[bytes], since: int) -> None:
        """A writer skipped ``keys``: those whose server left an exchange unanswered after
        ``since`` (a ``checkpoint``), or is unavailable now, may have been skipped because of
        it (a read that decides a write missed them), so that server missed writes and is
        revoked, as if they had been sent (``CacheUnavailable`` if nothing can record it). A
        key moving between servers raises ``KeysMoving``: the write must be made again
        once this process uses the ring's next state (memcache/ring.py)."""
        placement = self.placement()
        owners = [MOVED] * len(keys) if placement is None else placement.owners(keys)
        if MOVED in owners or (keys and self._moving_at > since):
            # A skip decided by a moving key's made-up answer (a head read as missing) is not
            # an absence, even if this process has moved on to the next ring state since.
            raise KeysMoving("memcached ring: keys written are moving between servers")
        assert placement is not None  # no owner is MOVED
        lost: dict[str, ServerEpoch] = {}
        held: dict[str, ServerEpoch] = {}
        for node in sorted({placement.nodes[o] for o in owners}):
            seq, epoch = self._unanswered_at.get(node, (0, None))
            if epoch is not None and seq > since:
                lost[node] = epoch
                continue
            record = self.record()
            if record is None:  # the record cannot be read: made again under the next lease
                raise KeysMoving("memcached ring: no lease on the record to judge a skipped write")
            use = self.use(node, record)
            if use.suffix is None and use.skip_is_missed:
                lost[node] = use.epoch
            else:  # down in the record (free), or absent under an epoch not up yet
                held[node] = use.epoch
        self.hold(self.revoke(lost) | held)

    # -- epochs in the record ----------------------------------------------------------------

    def outlived(self, suffixes: Mapping[str, bytes], renew: bool = True) -> list[str]:
        """Servers whose use changed during an exchange (the record, read again if the lease
        ran out meanwhile, gives them another epoch, or none can be read; without ``renew``,
        none is read: a lease run out outlives them all): their replies are not to be used.
        A lease guarantees that its epoch is not revoked with a commit behind the revocation
        only while it lasts, and a request may be sent, and answered, up to a timeout after
        its lease was checked: an answer from a revoked epoch, arriving after the revoking
        writer committed, would miss that writer's write. Only the record decides: a server
        this process marked down meanwhile (another thread's timeout) answered all the same,
        and its answers stand."""
        if not suffixes:
            return []
        record = self.record() if renew else self.trust.ring.leased()
        return [n for n, suffix in suffixes.items() if _valid_suffix(record, n) != suffix]

    def revoke(self, lost: Mapping[str, ServerEpoch]) -> dict[str, ServerEpoch]:
        """Servers that missed a write sent (or skipped) under their epochs in ``lost``: the
        record gives each a new epoch, ``DOWN``, in one compare-and-set (unless the record has
        left that epoch already). Returns each server's epoch in the record after it, to
        ``hold`` on: once every lease on an older epoch has run out, no process reads the items
        that missed the write. One change and one wait however many servers missed it (a whole
        fleet down costs a writer one lease, not one per server). ``CacheUnavailable`` when the
        record cannot be read or written: then nothing records that their items are stale,
        and the caller must not go on."""
        if not lost:
            return {}
        for node, epoch in sorted(lost.items()):
            if epoch.state is EpochState.DOWN:  # no write is sent under one: no lease was held
                raise CacheUnavailable(
                    f"memcached {node}: missed writes, and no lease on the record"
                )
        revocations = {
            node: (epoch.value, ServerEpoch(self.trust.new_epoch(), EpochState.DOWN))
            for node, epoch in sorted(lost.items())
        }
        record = self.trust.ring.update(_revoked(revocations))
        if record is None:
            raise CacheUnavailable(f"memcached {min(lost)}: missed writes, and no record of it")
        return {node: record.epoch(node) for node in lost}

    def hold(self, epochs: Mapping[str, ServerEpoch]) -> None:
        """Returns once every lease on an epoch older than ``epochs`` gives each server has
        run out (``ServerTrust.held_until``, the latest of them): a write made, skipped or
        missed there is then read by no process through an older epoch's items."""
        trust = self.trust
        until = max((trust.held_until(n, e) for n, e in epochs.items()), default=float("-inf"))
        self.wait(until - trust.clock())

    def advance(self) -> None:
        """Brings servers back, one step of the record each: a server ``DOWN`` that answers a
        probe becomes ``RETURNING`` under its new epoch; one ``RETURNING`` for a lease period
        since this process first saw it becomes ``UP`` (every lease taken while it was down
        has run out, so no writer skips a write to it any more). Processes racing make the
        same step, and the compare-and-set lets one of them make it."""
        view = self.trust.ring
        record = view.leased()
        if not self._brings_back or record is None or not record.returning_or_down():
            return
        for node in record.used:
            epoch = record.epoch(node)
            if epoch.state is EpochState.DOWN:
                if self.trust.is_down(node) or not self._probe(node):
                    continue
                after = ServerEpoch(epoch.value, EpochState.RETURNING)
            elif (
                epoch.state is EpochState.UP
                or self.trust.was_down(node)
                or view.clock() < view.first_seen(node, epoch) + view.stale_s
            ):
                continue
            else:
                after = ServerEpoch(epoch.value, EpochState.UP)
            view.update(_stepped(node, epoch, after))

    def wait(self, seconds: float) -> None:
        if seconds > 0:
            self._sleep(seconds)

    def unusable(self) -> list[str]:
        """The servers of this process's ring state that cannot be read and filled now."""
        record = self.trust.ring.leased() if self.placement() is not None else None
        uses = [(s, self.use(s, record)) for s in self.trust.servers]
        return [server for server, use in uses if not (use.readable and use.creates)]

    def settle(self) -> None:
        """Returns once every server is usable (up in the record for a lease, answering),
        bringing servers back meanwhile (two lease periods for one that was down);
        ``CacheUnavailable`` if one is still not after a few lease periods."""
        view = self.trust.ring
        deadline = view.clock() + 3 * view.stale_s + 4 * self.trust.settings.timeout_s + 1.0
        while (waiting := self.unusable()) and view.clock() < deadline:
            self.advance()
            self.wait(min(view.stale_s, 1.0) / 10 or 0.01)
        if waiting:
            raise CacheUnavailable(f"memcached {waiting[0]}: not usable")
