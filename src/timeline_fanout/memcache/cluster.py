"""Memcached over several servers, batched and pipelined, with typed results.

Why not ``HashClient``: it defaults to noreply (so ``add``/``append`` report success for writes
that stored nothing), and on failures it drops a server from the ring, silently remapping its keys
to another server and back again later, which resurrects stale lists. Here keys are placed with the
same rendezvous hash ``HashClient`` uses and every write waits for its reply. A server that does
not answer is down for a while and its keys are unavailable (memcache/trust.py): reads miss them,
writes to them are not sent and revoke the server's epoch in the shared record, so its items
are never served again; ``available`` tells the read paths which keys to answer from the edge
store. Only when nothing can record a revocation (the record cannot be read or written) does a
write raise ``CacheUnavailable`` for the caller's retry policy to handle.

Batches of keys (store commands, INCR, DELETE, meta gets) go through ``ServerPipe`` (see
memcache/wire.py for why); FLUSH through pymemcache. It implements
``memcache.interface.Cache``, the Protocol the layers above are written against.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import compress, repeat
from operator import eq
from typing import Any, TypeVar

from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheError

from timeline_fanout.memcache.ring import (
    MOVED,
    EpochState,
    Placement,
    RecordChange,
    RingRecord,
    ServerEpoch,
)
from timeline_fanout.memcache.trust import ServerTrust, ServerUse
from timeline_fanout.memcache.wire import (
    NOT_READ,
    QUIET_VALUE_MAX,
    CacheUnavailable,
    Item,
    KeysMoving,
    Outcome,
    Refused,
    ServerPipe,
    cas_on,
    cas_pipeline,
    line_pipeline,
    meta_get_pipeline,
    quiet_append_pipeline,
    same_value_pipeline,
    store_pipeline,
)

__all__ = [
    "PIPELINE",
    "CacheUnavailable",
    "Item",
    "MemcacheCluster",
    "Outcome",
    "Refused",
]

# memcached stops reading a connection whose replies are not being read, so one huge write
# would deadlock against its own replies: pipelines are cut at this many commands.
PIPELINE = 2000
# Pipelines sent to one server before its first replies are read: two keep the server busy
# while the client reads and builds, and bound unread replies to a few tens of KB.
WINDOW = 2
T = TypeVar("T")
_GONE = b"NOT_FOUND\r\n"
_STORED_LINE = b"STORED\r\n"


def _stepped(node: str, before: ServerEpoch, after: ServerEpoch) -> RecordChange:
    """A change of the record: ``node``'s epoch ``before`` becomes ``after`` (no change once
    the record has left ``before``)."""

    def change(stored: RingRecord) -> RingRecord | None:
        return stored.with_epoch(node, after) if stored.epoch(node) == before else None

    return change


def _revoked(node: str, value: str, revoked: ServerEpoch) -> RecordChange:
    """A revocation: ``node`` goes ``revoked`` if it is still under the epoch ``value``, up or
    returning (a write under a returning epoch is missed by that epoch once it is up)."""

    def change(stored: RingRecord) -> RingRecord | None:
        now = stored.epoch(node)
        if now.value != value or now.state is EpochState.DOWN:
            return None
        return stored.with_epoch(node, revoked)

    return change


def keep_ttl(ttl: int) -> int:
    """The expiry to write back for an item read with ``ttl`` seconds left (-1: none), so that
    a rewrite (CAS) never extends an item's life. An item read without its time to live (the
    event loop's reads, which never write) raises ``ValueError``: writing it back could make it
    immortal."""
    if ttl == NOT_READ:
        raise ValueError("an item read without its time to live cannot be written back")
    return 0 if ttl < 0 else max(ttl, 1)


def _cas_ids(ids: list[bytes]) -> list[bytes]:
    """``ids``, if each is one: an item read without its CAS id (``Item.cas`` empty) has no
    version to be written back against (memcached would refuse ``md key C`` with nothing
    after it as a client error, failing the whole batch)."""
    if not all(ids):
        raise ValueError("an item read without its CAS id cannot be written back")
    return ids


@dataclass(frozen=True, slots=True)
class _Job:
    """Commands for many keys: ``build(keys, *columns)`` makes one pipeline's bytes for a slice
    of ``keys`` (epoch suffix included) and of the columns aligned with them. A ``quiet`` job's
    ``build(keys, suffix)`` appends the suffix itself (inside its one join), and its replies
    are read up to ``MN`` and returned with the suffix and the keys sent under another name
    (by name), ``(replies, suffix, keys)``, for ``ServerPipe.refusals``."""

    build: Callable[..., bytes]
    keys: Sequence[bytes]
    columns: tuple[Sequence[Any], ...] = ()
    values: bool = False  # replies carry values (meta gets), not one line each
    # The reply line of a server that holds nothing and keeps nothing (what an unavailable
    # server's keys get: an eviction the callers already handle); None for a read.
    # A write (any: an ADD too) that a server did not answer may have been taken, or may be
    # taken late, when a hung server resumes and runs what waited in its socket: an ADD built
    # from what the store held then can create an item older than a later write. So the
    # server's epoch is revoked for every unanswered write.
    absent: bytes | None = None
    quiet: bool = False  # meta sets answered only when refused, then MN (wire.py)
    cas_column: int | None = None  # the column of CAS tokens (``Item.cas``), if any
    # An ADD fills an absent item, which only a server up in the record for a lease takes
    # (``ServerUse.creates``): elsewhere it is answered as stored and not sent. A SET goes as
    # ``replacing`` (REPLACE: overwrites, creates nothing) to a returning server.
    fills: bool = False
    replacing: Callable[..., bytes] | None = None

    def on(self, columns: Sequence[Sequence[Any]], connection: int) -> list[Sequence[Any]]:
        """``columns`` to send on ``connection``: CAS tokens read on another connection made
        ``NO_CAS_ID`` (``wire.cas_on``: the server may have restarted since)."""
        at = self.cas_column
        if at is None:
            return list(columns)
        return [*columns[:at], cas_on(columns[at], connection), *columns[at + 1 :]]

    def unanswered(self, keys: Sequence[bytes]) -> Any:
        """The replies of the commands for ``keys`` to an unavailable server; a quiet job's
        refuses every key, as a quiet append to a server holding nothing would."""
        if self.values:
            return [None] * len(keys)
        if self.quiet:
            return b"".join([b"NS k%s\r\n" % k for k in keys]), b"", {}
        return (self.absent or b"EN\r\n") * len(keys)


def _append_job(value: bytes, keys: Sequence[bytes]) -> _Job:
    """``value`` appended to each of ``keys``: quiet where the value is short enough (see
    ``wire.QUIET_VALUE_MAX``). An unavailable server's appends are answered not stored."""
    if len(value) <= QUIET_VALUE_MAX:
        return _Job(partial(_quiet_appends, value), keys, quiet=True, absent=b"NOT_STORED\r\n")
    return _Job(partial(_classic_appends, value), keys, absent=b"NOT_STORED\r\n")


def _quiet_appends(value: bytes, keys: list[bytes], suffix: bytes) -> bytes:
    return quiet_append_pipeline(keys, suffix, value)


def _classic_appends(value: bytes, keys: list[bytes]) -> bytes:
    return same_value_pipeline(b"append", keys, value)


class MemcacheCluster:
    """A cluster of servers, each used only while it answers and under its epoch's lease
    (memcache/trust.py); ``trust`` may be shared with the process's event-loop client."""

    def __init__(
        self,
        servers: Iterable[tuple[str, int]],
        timeout: float | None = None,
        trust: ServerTrust | None = None,
    ) -> None:
        servers = list(servers)
        self._trust = trust = trust or ServerTrust.of(servers, timeout)
        self._unanswered_seq = 0  # exchanges left unanswered, counted (``checkpoint``)
        # Per server, the count at its last unanswered exchange and the epoch it went under.
        self._unanswered_at: dict[str, tuple[int, ServerEpoch]] = {}
        # The count when a key was last answered as moving (memcache/ring.py): a writer that
        # read a moved list's head as missing under one ring state may reach ``missed`` under
        # the next, where the list is not moving any more (its lease ran out mid-write).
        self._moving_at = 0
        self._clients: dict[str, Client] = {}
        self._pipes: dict[str, ServerPipe] = {}
        for host, port in servers:
            self._connect(f"{host}:{port}")
        if not self._clients:
            raise ValueError("no memcached servers configured")
        # Parses the replies made up for moving keys (memcache/ring.py); never connected.
        self._nowhere = ServerPipe("moving", 0, trust.settings.timeout_s)

    @property
    def servers(self) -> list[str]:
        return list(self._clients)

    def _placement(self) -> Placement | None:
        """Where keys are now (memcache/ring.py), with the servers a newer ring record names
        connected; None when this process cannot know (its ring lease ran out and the record
        cannot be read): then no key may be used."""
        view = self._trust.ring
        placement = view.renewed()
        if placement is not None and view.record.returning_or_down():
            self.advance()  # a step back may be due (probes back off); a probe takes time:
            placement = view.renewed()  # the lease is renewed again if it ran out meanwhile
        if placement is not None:
            for node in placement.nodes:
                if node not in self._pipes:
                    self._connect(node)
        return placement

    def _connect(self, node: str) -> None:
        host, port = node.rsplit(":", 1)
        timeout = self._trust.settings.timeout_s
        self._clients[node] = Client(
            (host, int(port)),
            connect_timeout=timeout,
            timeout=timeout,
            default_noreply=False,
            no_delay=True,
        )
        self._pipes[node] = ServerPipe(host, int(port), timeout)

    @property
    def trust(self) -> ServerTrust:
        return self._trust

    def available(self, keys: Sequence[bytes]) -> list[bool]:
        """Per key, whether its server may be read now (up in the record under a live lease,
        answering) and it is not moving between servers; only the servers that own ``keys``
        are looked at. A read path answers the others from the edge store and writes nothing
        for them."""
        placement = self._placement()
        record = self._trust.ring.leased()
        if placement is None or record is None:
            return [False] * len(keys)
        owners = placement.owners(keys)
        usable = {
            owner: self._use(placement.nodes[owner], record).readable
            for owner in set(owners)
            if owner != MOVED
        }
        return [owner != MOVED and usable[owner] for owner in owners]

    def server_for(self, key: bytes) -> str:
        """The server ``key`` is on (``ValueError`` while it moves)."""
        placement = self._placement()
        owner = MOVED if placement is None else placement.owners([key])[0]
        if placement is None or owner == MOVED:
            raise ValueError(f"{key!r} is moving between servers")
        return placement.nodes[owner]

    def checkpoint(self) -> int:
        """A mark to pass to ``missed``: the exchanges left unanswered so far."""
        return self._unanswered_seq

    def missed(self, keys: Sequence[bytes], since: int) -> None:
        """A writer skipped ``keys``: those whose server left an exchange unanswered after
        ``since`` (a ``checkpoint``), or is unavailable now, may have been skipped because of
        it (a read that decides a write missed them), so that server missed writes and is
        revoked, as if they had been sent (``CacheUnavailable`` if nothing can record it). A
        key moving between servers raises ``KeysMoving``: the write must be made again
        once this process uses the ring's next state (memcache/ring.py)."""
        placement = self._placement()
        owners = [MOVED] * len(keys) if placement is None else placement.owners(keys)
        if MOVED in owners or (keys and self._moving_at > since):
            # A skip decided by a moving key's made-up answer (a head read as missing) is not
            # an absence, even if this process has moved on to the next ring state since.
            raise KeysMoving("memcached ring: keys written are moving between servers")
        assert placement is not None  # no owner is MOVED
        for node in sorted({placement.nodes[o] for o in owners}):
            seq, epoch = self._unanswered_at.get(node, (0, None))
            if epoch is not None and seq > since:
                self._revoke(node, epoch)
                continue
            record = self._record()
            if record is None:  # the record cannot be read: made again under the next lease
                raise KeysMoving("memcached ring: no lease on the record to judge a skipped write")
            use = self._use(node, record)
            if use.suffix is None and use.skip_is_missed:
                self._revoke(node, use.epoch)
            else:  # down in the record (free), or absent under an epoch not up yet
                self._hold(node, use.epoch)

    def _pipelined(self, jobs: Sequence[_Job]) -> list[tuple[int, ServerPipe, list[bytes], Any]]:
        """Every job's commands, split by server, PIPELINE commands per write and WINDOW writes
        unanswered per server, all servers at once: while one server's replies are read, the
        servers work through what is queued, across jobs. Reads that bring values back keep
        one write in flight (their replies are big; a second write could stall against them).
        Returns, per pipeline, its job's index, server, keys and replies (raw reply lines, or
        the values read). Each key is sent under its name (memcache/ring.py) with its
        server's epoch suffix.

        A server that is unavailable, or fails during the exchange, gets nothing more: its
        pipelines are answered as a server holding nothing would answer them, the server is
        marked down (a failure closes its connection with its replies unread), and if any of
        them wrote, its epoch is revoked before this returns (memcache/trust.py).

        A key moving between servers (memcache/ring.py) is read as missing; a write to one is
        not sent, and raises ``KeysMoving`` once the rest is done: the writer's batch
        must wait for this process's next ring state, and is made again then."""
        placement = self._placement()
        # The epochs under the same lease as the placement; none (the lease ran out just now):
        # no key is used, as when the record cannot be read.
        record = self._trust.ring.leased() if placement is not None else None
        placement = placement if record is not None else None
        nodes = placement.nodes if placement is not None else []
        queues: dict[str, deque[tuple[int, list[bytes], list[list[Any]]]]] = {
            node: deque() for node in nodes
        }
        done: list[tuple[int, ServerPipe, list[bytes], Any]] = []
        names: dict[bytes, bytes] = {}  # the keys sent under another name (memcache/ring.py)
        unwritten = False  # a write to a key moving between servers was not sent
        for index, job in enumerate(jobs):
            if placement is None:
                owners = [MOVED] * len(job.keys)
            else:
                owners = placement.owners(job.keys)
                names.update(placement.names(job.keys))
            if MOVED in owners:  # answered as no server: it holds nothing, keeps nothing
                self._moving_at = self._unanswered_seq = self._unanswered_seq + 1
                moving = [k for k, o in zip(job.keys, owners, strict=True) if o == MOVED]
                done.append((index, self._nowhere, moving, job.unanswered(moving)))
                unwritten = unwritten or job.absent is not None
            for at, node in enumerate(nodes):
                mine = list(map(eq, owners, repeat(at)))
                keys = list(compress(job.keys, mine))
                cols = [list(compress(c, mine)) for c in job.columns]
                queues[node].extend(
                    (index, keys[i : i + PIPELINE], [c[i : i + PIPELINE] for c in cols])
                    for i in range(0, len(keys), PIPELINE)
                )
        suffixes: dict[str, bytes] = {}
        uses: dict[str, ServerUse] = {}
        lost: dict[str, ServerEpoch] = {}  # servers that missed a write: the epoch it went under
        held: dict[str, ServerEpoch] = {}  # servers not up in the record that a write went to
        replacing: set[str] = set()  # servers a SET goes to as REPLACE (not up in the record)
        for node, queue in queues.items():
            if not queue:
                continue
            use = uses[node] = self._use(node, record)
            if use.epoch.state is not EpochState.UP and any(jobs[i].absent for i, _, _ in queue):
                held[node] = use.epoch  # sent or skipped, until older leases ran out
            if use.suffix is None:
                self._unanswered(node, queue, use, jobs, done, lost)
                continue
            suffixes[node] = use.suffix
            if use.replaces:
                replacing.add(node)
            if not use.creates and any(jobs[index].fills for index, _, _ in queue):
                # No item is filled under an epoch before every process may create there: an
                # ADD is answered as a server that keeps nothing would, and is no missed write.
                adds = deque(entry for entry in queue if jobs[entry[0]].fills)
                kept = [entry for entry in queue if not jobs[entry[0]].fills]
                queue.clear()
                queue.extend(kept)
                self._unanswered(node, adds, use._replace(skip_is_missed=False), jobs, done, lost)
        window = 1 if any(job.values for job in jobs) else WINDOW
        flying: dict[str, deque[tuple[int, list[bytes]]]] = {node: deque() for node in queues}

        def failed(node: str) -> None:
            self._pipes[node].close()
            self._trust.mark_down(node)
            queues[node].extendleft((i, m, []) for i, m in reversed(flying[node]))
            flying[node].clear()
            suffixes.pop(node, None)
            self._unanswered(node, queues[node], uses[node], jobs, done, lost)

        while any(queues.values()) or any(flying.values()):
            for node, queue in queues.items():
                try:
                    while queue and len(flying[node]) < window:
                        index, mine, cols = queue.popleft()
                        flying[node].append((index, mine))
                        suffix = suffixes[node]
                        named = [names.get(k, k) for k in mine] if names else mine
                        if jobs[index].quiet:
                            self._pipes[node].send(jobs[index].build(named, suffix))
                            continue
                        sent = [k + suffix for k in named] if suffix else named
                        pipe = self._pipes[node]
                        job = jobs[index]
                        build = job.replacing if node in replacing and job.replacing else job.build
                        pipe.send(build(sent, *job.on(cols, pipe.connect())))
                except CacheUnavailable:
                    failed(node)
            for node, in_flight in flying.items():
                if not in_flight:
                    continue
                index, mine = in_flight[0]
                pipe = self._pipes[node]
                job = jobs[index]
                try:
                    if job.quiet:
                        back = {names[k]: k for k in mine if k in names} if names else {}
                        replies: Any = (pipe.receive_quiet(), suffixes[node], back)
                    elif job.values:
                        replies = pipe.receive_values(len(mine))
                    else:
                        replies = pipe.receive(len(mine))
                        if node in replacing and job.replacing:  # a server keeping nothing
                            replies = replies.replace(b"NOT_STORED\r\n", _STORED_LINE)
                    done.append((index, pipe, mine, replies))
                except CacheUnavailable:
                    failed(node)
                else:
                    in_flight.popleft()
        for node in self._outlived(suffixes):
            again: deque[tuple[int, list[bytes], list[list[Any]]]] = deque(
                (i, keys, []) for i, pipe, keys, _ in done if pipe.name == node
            )
            done = [entry for entry in done if entry[1].name != node]
            self._unanswered(node, again, uses[node], jobs, done, lost)
        for node, epoch in sorted(lost.items()):
            self._revoke(node, epoch)
        for node, epoch in sorted(held.items()):
            self._hold(node, epoch)
        if placement is not None and self._trust.ring.current() is not placement:
            self._unplaced(jobs, done, placement)
        if unwritten:
            raise KeysMoving("memcached ring: keys written are moving between servers")
        return done

    def _unplaced(
        self,
        jobs: Sequence[_Job],
        done: list[tuple[int, ServerPipe, list[bytes], Any]],
        placement: Placement,
    ) -> None:
        """The ring lease this exchange was placed under ran out before its end: the values
        read of keys that are not on the same server under the same name in the record read
        again (moving, moved, moved back under a new name), or whose place this process
        cannot know now, are made misses (in place). A process may have sent its reads just
        before the next state began, or been paused past whole changes, and a copy left
        behind by a move misses the writes made since (memcache/ring.py). Writes need no
        such check: the edge store write that each follows was made under the lease."""
        now = self._placement()
        if now is placement:
            return
        for at, (index, pipe, keys, replies) in enumerate(done):
            if not jobs[index].values:
                continue
            then = [placement.nodes[o] if o != MOVED else None for o in placement.owners(keys)]
            named = placement.names(keys)
            if now is None:
                same = [False] * len(keys)
            else:
                still = [now.nodes[o] if o != MOVED else None for o in now.owners(keys)]
                renamed = now.names(keys)
                same = [
                    a is not None and a == b and named.get(k, k) == renamed.get(k, k)
                    for k, a, b in zip(keys, then, still, strict=True)
                ]
            kept = [item if ok else None for ok, item in zip(same, replies, strict=True)]
            done[at] = (index, pipe, keys, kept)

    def _outlived(self, suffixes: Mapping[str, bytes]) -> list[str]:
        """Servers whose use changed during the exchange (the record, read again if the lease
        ran out meanwhile, gives them another epoch, or none can be read): their replies are
        treated as unanswered. A lease guarantees that its epoch is not revoked with a commit
        behind the revocation only while it lasts, and a request may be sent, and answered,
        up to a timeout after its lease was checked: an answer from a revoked epoch, arriving
        after the revoking writer committed, would miss that writer's write."""
        record = self._record()
        return [n for n, suffix in suffixes.items() if self._use(n, record).suffix != suffix]

    def _record(self) -> RingRecord | None:
        """The record under a live lease, read again if it ran out (a revocation's wait, a
        slow exchange); None when it cannot be read."""
        view = self._trust.ring
        record = view.leased()
        if record is None and self._placement() is not None:
            record = view.leased()
        return record

    def _unanswered(
        self,
        node: str,
        queue: deque[tuple[int, list[bytes], list[list[Any]]]],
        use: ServerUse,
        jobs: Sequence[_Job],
        done: list[tuple[int, ServerPipe, list[bytes], Any]],
        lost: dict[str, ServerEpoch],
    ) -> None:
        """Answers ``node``'s queued pipelines as a server holding nothing would, and notes in
        ``lost`` (with the epoch they went under) whether one of them wrote, unless ``use``
        says a skip there is no missed write."""
        pipe = self._pipe(node)
        while queue:
            index, mine, _ = queue.popleft()
            job = jobs[index]
            done.append((index, pipe, mine, job.unanswered(mine)))
            self._unanswered_seq += 1
            if not use.skip_is_missed:
                continue
            if job.absent is not None:
                lost[node] = use.epoch
            self._unanswered_at[node] = (self._unanswered_seq, use.epoch)

    # -- epochs in the record (memcache/trust.py) --------------------------------------------

    def _use(self, node: str, record: RingRecord | None) -> ServerUse:
        """How ``node`` may be used under ``record``, probing it first if this process found
        it down and a probe is due (a server down in the record is probed by ``advance``)."""
        trust = self._trust
        if (
            record is not None
            and record.epoch(node).state is not EpochState.DOWN
            and trust.was_down(node)
            and not trust.is_down(node)
        ):
            self._probe(node)
        return trust.use(node, record)

    def _probe(self, node: str) -> bool:
        """Whether ``node`` answers now (``mn``, the meta no-op); a server stopped with SIGSTOP
        accepts the connection and times out here."""
        pipe = self._pipe(node)
        try:
            pipe.send(b"mn\r\n")
            if pipe.receive(1) != b"MN\r\n":
                pipe.close()
                raise CacheUnavailable(f"memcached {node}: no answer to mn")
        except CacheUnavailable:
            self._trust.mark_down(node)
            return False
        self._trust.mark_up(node)
        return True

    def _revoke(self, node: str, epoch: ServerEpoch) -> None:
        """``node`` missed a write sent (or skipped) under ``epoch``: the record gives it a new
        epoch, ``DOWN``, by compare-and-set (unless the record has left ``epoch`` already),
        and this returns a lease period after this process first saw the record without
        ``epoch``: every lease taken before has run out, and no process reads the items that
        missed the write. ``CacheUnavailable`` when the record cannot be read or written: then
        nothing records that its items are stale, and the caller must not go on."""
        if epoch.state is EpochState.DOWN:  # no write is sent under one: no lease was held
            raise CacheUnavailable(f"memcached {node}: missed writes, and no lease on the record")
        revoked = ServerEpoch(self._trust.new_epoch(), EpochState.DOWN)
        record = self._trust.ring.update(_revoked(node, epoch.value, revoked))
        if record is None:
            raise CacheUnavailable(f"memcached {node}: missed writes, and no record of it")
        self._hold(node, record.epoch(node))

    def _hold(self, node: str, epoch: ServerEpoch) -> None:
        """Returns once every lease on an epoch of ``node`` older than ``epoch`` has run out
        (``ServerTrust.held_until``): a write made, skipped or missed there is then read by no
        process through an older epoch's items."""
        trust = self._trust
        self.wait(trust.held_until(node, epoch) - trust.clock())

    def advance(self) -> None:
        """Brings servers back, one step of the record each: a server ``DOWN`` that answers a
        probe becomes ``RETURNING`` under its new epoch; one ``RETURNING`` for a lease period
        since this process first saw it becomes ``UP`` (every lease taken while it was down
        has run out, so no writer skips a write to it any more). Processes racing make the
        same step, and the compare-and-set lets one of them make it."""
        view = self._trust.ring
        record = view.leased()
        if record is None or not record.returning_or_down():
            return
        for node in record.used:
            epoch = record.epoch(node)
            if epoch.state is EpochState.DOWN:
                if self._trust.is_down(node) or not self._probe(node):
                    continue
                after = ServerEpoch(epoch.value, EpochState.RETURNING)
            elif (
                epoch.state is EpochState.UP
                or self._trust.was_down(node)
                or view.clock() < view.first_seen(node, epoch) + view.stale_s
            ):
                continue
            else:
                after = ServerEpoch(epoch.value, EpochState.UP)
            view.update(_stepped(node, epoch, after))

    def _pipe(self, node: str) -> ServerPipe:
        """``node``'s pipe, connected first if a newer ring record named it."""
        if node not in self._pipes:
            self._connect(node)
        return self._pipes[node]

    def _call(self, server: str, method: str, *args: Any) -> Any:
        self._pipe(server)
        client = self._clients[server]
        try:
            return getattr(client, method)(*args)
        except (TimeoutError, OSError, MemcacheError) as exc:
            client.close()
            raise CacheUnavailable(f"memcached {server}: {exc}") from exc

    def wait(self, seconds: float) -> None:
        """Before asking again for items someone else is writing (a list being built). A
        client that must not block (graph/timelines/warm_reads.py) refuses instead."""
        if seconds > 0:
            time.sleep(seconds)

    def gets_many(self, keys: Iterable[bytes]) -> dict[bytes, Item]:
        """Items with their CAS ids and time to live (for reads that may turn into a compaction
        or a commit); a missing key is left out."""
        job = _Job(meta_get_pipeline, list(dict.fromkeys(keys)), values=True)
        found: dict[bytes, Item] = {}
        for _, _, mine, replies in self._pipelined([job]):
            found.update((k, v) for k, v in zip(mine, replies, strict=True) if v is not None)
        return found

    def get_many(self, keys: Iterable[bytes]) -> dict[bytes, bytes]:
        return {key: item.value for key, item in self.gets_many(keys).items()}

    def _outcomes(self, job: _Job) -> dict[bytes, Outcome]:
        found: dict[bytes, Outcome] = {}
        for _, pipe, keys, replies in self._pipelined([job]):
            found.update(zip(keys, pipe.outcomes(replies, len(keys)), strict=True))
        return found

    def _store(
        self, command: bytes, values: Mapping[bytes, bytes], expire: int = 0
    ) -> dict[bytes, Outcome]:
        def build(keys: list[bytes], data: list[bytes]) -> bytes:
            return store_pipeline(command, keys, data, expire)

        def replace(keys: list[bytes], data: list[bytes]) -> bytes:
            return store_pipeline(b"replace", keys, data, expire)

        absent = b"NOT_STORED\r\n" if command == b"append" else _STORED_LINE
        job = _Job(
            build,
            list(values),
            (list(values.values()),),
            absent=absent,
            fills=command == b"add",
            replacing=replace if command == b"set" else None,
        )
        return self._outcomes(job)

    def add_many(self, values: Mapping[bytes, bytes], expire: int = 0) -> dict[bytes, Outcome]:
        """STORED where the key was created; NOT_STORED where it already existed."""
        return self._store(b"add", values, expire)

    def append_many(self, values: Mapping[bytes, bytes]) -> dict[bytes, Outcome]:
        """NOT_STORED: the key is missing; TOO_LARGE: the item would pass the size limit
        (memcached also answers NOT_STORED for that when the item is already near the limit,
        so a NOT_STORED item may still exist: ``exists_many`` tells)."""
        return self._store(b"append", values)

    def append_to_each(self, groups: Sequence[tuple[bytes, Sequence[bytes]]]) -> list[Refused]:
        """APPEND each group's value to every key of the group (a post to its followers'
        timelines), all groups in one pipelined exchange: a ``Refused`` for each append that
        was not stored, as in ``append_many``, in the order of each server's pipelines. A
        value of at most ``QUIET_VALUE_MAX`` bytes (any token) goes by quiet meta sets, so
        only refusals are answered; a longer one by classic ``append``, which tells a value
        too large for the server (TOO_LARGE) from a missing item."""
        jobs = [_append_job(value, keys) for value, keys in groups]
        refused: list[Refused] = []
        for index, pipe, mine, replies in self._pipelined(jobs):
            if jobs[index].quiet:
                raw, suffix, back = replies
                refused += [
                    Refused(index, back.get(k, k), Outcome.NOT_STORED)
                    for k in pipe.refusals(raw, suffix)
                ]
                continue
            outcomes = pipe.outcomes(replies, len(mine))
            refused += [
                Refused(index, k, o) for k, o in zip(mine, outcomes, strict=True) if not o.ok
            ]
        return refused

    def set_many(self, values: Mapping[bytes, bytes], expire: int = 0) -> dict[bytes, Outcome]:
        return self._store(b"set", values, expire)

    def cas_many(
        self, values: Mapping[bytes, tuple[bytes, bytes]], expire: int | Mapping[bytes, int] = 0
    ) -> dict[bytes, Outcome]:
        """``{key: (value, cas id)}``: STORED, EXISTS (changed since it was read), NOT_FOUND
        (gone) or TOO_LARGE, per key. ``expire``: one for all, or one per key."""
        keys = list(values)
        expires = [expire] * len(keys) if isinstance(expire, int) else [expire[k] for k in keys]
        pairs = list(values.values())
        columns = ([v for v, _ in pairs], _cas_ids([c for _, c in pairs]), expires)
        job = _Job(cas_pipeline, keys, columns, absent=b"NOT_FOUND\r\n", cas_column=1)
        return self._outcomes(job)

    def cas(self, key: bytes, value: bytes, cas_id: bytes, expire: int = 0) -> Outcome:
        return self.cas_many({key: (value, cas_id)}, expire)[key]

    def delete_if_unchanged(self, items: Mapping[bytes, bytes]) -> dict[bytes, Outcome]:
        """``{key: cas id}``: delete each item only if it is still the one that was read (meta
        delete with C): a reader that found a list broken must not drop a newer, good one."""

        def build(keys: list[bytes], ids: list[bytes]) -> bytes:
            return line_pipeline(b"md", keys, [b" C" + c for c in ids])

        ids = (_cas_ids(list(items.values())),)
        return self._outcomes(_Job(build, list(items), ids, absent=b"NF\r\n", cas_column=0))

    def _lines(
        self, command: bytes, args: Mapping[bytes, bytes], absent: bytes | None
    ) -> dict[bytes, bytes]:
        """``absent``: as in ``_Job`` (None for a read)."""

        def build(keys: list[bytes], data: list[bytes]) -> bytes:
            return line_pipeline(command, keys, data)

        job = _Job(build, list(args), (list(args.values()),), absent=absent)
        replies: dict[bytes, bytes] = {}
        for _, pipe, keys, raw in self._pipelined([job]):
            replies.update(zip(keys, pipe.reply_lines(raw), strict=True))
        return replies

    def incr_many(self, deltas: Mapping[bytes, int]) -> dict[bytes, int | None]:
        """New values, None where the counter does not exist."""
        replies = self._lines(b"incr", {k: b" %d" % d for k, d in deltas.items()}, _GONE)
        return {k: None if v == b"NOT_FOUND" else int(v) for k, v in replies.items()}

    def decr_many(self, deltas: Mapping[bytes, int]) -> None:
        """Counters shrunk (memcached stops at 0); a missing one stays missing."""
        self._lines(b"decr", {k: b" %d" % d for k, d in deltas.items()}, _GONE)

    def exists_many(self, keys: Iterable[bytes]) -> dict[bytes, bool]:
        """Meta get without flags: a hit (HD) or a miss (EN), no value sent, and the item's
        expiry left alone (leases have one)."""
        replies = self._lines(b"mg", dict.fromkeys(keys, b""), None)
        return {k: v == b"HD" for k, v in replies.items()}

    def delete_many(self, keys: Iterable[bytes]) -> None:
        self._lines(b"delete", dict.fromkeys(keys, b""), _GONE)

    def versions(self) -> dict[str, str]:
        """The version of every server that answers: a readiness probe that touches no key.
        One server down is not an outage (its keys are gone around), so only when none
        answers is this ``CacheUnavailable`` (naming the first)."""
        found: dict[str, str] = {}
        failures: list[CacheUnavailable] = []
        for server in self._trust.servers:
            try:
                found[server] = self._call(server, "version").decode("ascii", "replace")
            except CacheUnavailable as exc:
                failures.append(exc)
        if not found:
            raise failures[0]
        return found

    def flush_all(self) -> None:
        """Every item of every server gone (an eviction of everything, which every layer
        survives; the epochs are in the record, not on the servers)."""
        for server in self._clients:
            self._call(server, "flush_all", 0, False)

    def unusable(self) -> list[str]:
        """The servers of this process's ring state that cannot be read and filled now."""
        record = self._trust.ring.leased() if self._placement() is not None else None
        uses = [(s, self._use(s, record)) for s in self._trust.servers]
        return [server for server, use in uses if not (use.readable and use.creates)]

    def settle(self) -> None:
        """Returns once every server is usable (up in the record for a lease, answering),
        bringing servers back meanwhile (two lease periods for one that was down);
        ``CacheUnavailable`` if one is still not after a few lease periods."""
        view = self._trust.ring
        deadline = view.clock() + 3 * view.stale_s + 4 * self._trust.settings.timeout_s + 1.0
        while (waiting := self.unusable()) and view.clock() < deadline:
            self.advance()
            self.wait(min(view.stale_s, 1.0) / 10 or 0.01)
        if waiting:
            raise CacheUnavailable(f"memcached {waiting[0]}: not usable")

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        for pipe in self._pipes.values():
            pipe.close()
