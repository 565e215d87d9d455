"""Batches of commands run as one pipelined exchange per server, all servers at once.

A ``Job`` is the commands of one kind for many keys (how to build a pipeline for a slice of
them, and how an unreachable server would have answered them). ``Executor.run`` splits every
job's keys by server (the router's placement), sends ``PIPELINE`` commands per write and at
most ``WINDOW`` writes unanswered per server, and reads the replies back in order: while one
server's replies are read, the others work through what is queued, across jobs.

What the router decides, the executor obeys: a key is sent under its server's epoch suffix
(``ServerUse``), an ADD is not sent where nothing may be created, a SET goes as REPLACE to a
returning server, and a server that is unusable, or fails mid-exchange, is answered as a
server holding nothing would answer (its epoch revoked when one of those commands wrote).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from timeline_fanout.memcache.pools import ServerPipe, ServerPools, cas_on
from timeline_fanout.memcache.ring import MOVED, EpochState, Placement, ServerEpoch
from timeline_fanout.memcache.router import Router, Split, sent
from timeline_fanout.memcache.trust import ServerUse
from timeline_fanout.memcache.wire import NOT_STORED, STORED, CacheUnavailable, KeysMoving

__all__ = ["PIPELINE", "WINDOW", "Answered", "Executor", "Job"]

# memcached stops reading a connection whose replies are not being read, so one huge write
# would deadlock against its own replies: pipelines are cut at this many commands.
PIPELINE = 2000
# Pipelines sent to one server before its first replies are read: two keep the server busy
# while the client reads and builds, and bound unread replies to a few tens of KB.
WINDOW = 2


@dataclass(frozen=True, slots=True)
class Job:
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
        ``NO_CAS_ID`` (``pools.cas_on``: the server may have restarted since)."""
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


class Answered(NamedTuple):
    """One pipeline's replies: its job's index, the pipe that parses them (its server's), the
    keys (as the caller named them) and the replies (raw lines, the values read, or a quiet
    job's ``(replies, suffix, keys renamed)``)."""

    job: int
    pipe: ServerPipe
    keys: list[bytes]
    replies: Any


_Queued = tuple[int, list[bytes], list[list[Any]]]  # a job's index, keys, columns


class Executor:
    """Runs jobs for one blocking client (one thread at a time, as its pipes)."""

    def __init__(self, router: Router, pools: ServerPools) -> None:
        self._router = router
        self._pools = pools
        # Parses the replies made up for moving keys (memcache/ring.py); never connected.
        self._nowhere = ServerPipe("moving", 0, router.trust.settings.timeout_s)

    def run(self, jobs: Sequence[Job], best_effort: bool = False) -> list[Answered]:
        """Every job's commands, split by server, each key sent under its name
        (memcache/ring.py) with its server's epoch suffix. Reads that bring values back keep
        one write in flight (their replies are big; a second write could stall against them).

        A server that is unavailable, or fails during the exchange, gets nothing more: its
        pipelines are answered as a server holding nothing would answer them, the server is
        marked down (a failure closes its connection with its replies unread), and if any of
        them wrote, its epoch is revoked before this returns (memcache/trust.py). A write to a
        server not up in the record holds the batch until older leases ran out.

        A key moving between servers (memcache/ring.py) is read as missing; a write to one is
        not sent, and raises ``KeysMoving`` once the rest is done: the writer's batch
        must wait for this process's next ring state, and is made again then. With
        ``best_effort`` (a reader's fills, fenced CAS and drops: ``Cache.fills``) such a write
        is answered as refused instead (NOT_STORED, NOT_FOUND), and nothing is raised; and a
        best-effort write not sent is no missed write, nor held: no commit follows it, and a
        fill left undone leaves the item as it was (a write sent and not answered still
        revokes: a hung server may take it late)."""
        router = self._router
        lease = router.lease()
        placement = lease.placement if lease is not None else None
        nodes = placement.nodes if placement is not None else []
        queues: dict[str, deque[_Queued]] = {node: deque() for node in nodes}
        done: list[Answered] = []
        names: dict[bytes, bytes] = {}  # the keys sent under another name (memcache/ring.py)
        unwritten = False  # a write to a key moving between servers was not sent
        for index, job in enumerate(jobs):
            split = (
                router.split(placement, job.keys, job.columns)
                if placement
                else Split([], [*job.keys], {})
            )
            names.update(split.names)
            if split.moving:  # answered as no server: it holds nothing, keeps nothing
                router.moving()
                made_up = job.unanswered(split.moving)
                if best_effort and job.absent == STORED:  # refused: NOT_STORED, not STORED
                    made_up = NOT_STORED * len(split.moving)
                done.append(Answered(index, self._nowhere, split.moving, made_up))
                unwritten = unwritten or (job.absent is not None and not best_effort)
            for node, keys, cols in split.routes:
                queues[node].extend(
                    (index, keys[i : i + PIPELINE], [c[i : i + PIPELINE] for c in cols])
                    for i in range(0, len(keys), PIPELINE)
                )
        suffixes: dict[str, bytes] = {}
        uses: dict[str, ServerUse] = {}
        lost: dict[str, ServerEpoch] = {}  # servers that missed a write: the epoch it went under
        held: dict[str, ServerEpoch] = {}  # servers not up in the record that a write went to
        replacing: set[str] = set()  # servers a SET goes to as REPLACE (not up in the record)

        def unanswered(node: str, queue: deque[_Queued], use: ServerUse) -> None:
            """``node``'s queued pipelines answered as a server holding nothing would; noted
            in ``lost`` if one of them wrote, unless ``use`` says a skip is no missed write."""
            pipe = self._pools.pipe(node)
            while queue:
                index, mine, _ = queue.popleft()
                done.append(Answered(index, pipe, mine, jobs[index].unanswered(mine)))
                router.unanswered(node, use)
                if use.skip_is_missed and jobs[index].absent is not None:
                    lost[node] = use.epoch

        for node, queue in queues.items():
            if not queue:
                continue
            assert lease is not None  # a server's queue is filled only under one
            use = uses[node] = router.use(node, lease.record)
            writes = any(jobs[i].absent for i, _, _ in queue)
            if use.epoch.state is not EpochState.UP and writes and not best_effort:
                held[node] = use.epoch  # sent or skipped, until older leases ran out
            if use.suffix is None:
                unanswered(node, queue, use._replace(skip_is_missed=False) if best_effort else use)
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
                unanswered(node, adds, use._replace(skip_is_missed=False))
        window = 1 if any(job.values for job in jobs) else WINDOW
        flying: dict[str, deque[tuple[int, list[bytes]]]] = {node: deque() for node in queues}

        def failed(node: str) -> None:
            self._pools.pipe(node).close()  # its replies unread: the connection is unusable
            router.trust.mark_down(node)
            queues[node].extendleft((i, m, []) for i, m in reversed(flying[node]))
            flying[node].clear()
            suffixes.pop(node, None)
            unanswered(node, queues[node], uses[node])

        try:
            while any(queues.values()) or any(flying.values()):
                for node, queue in queues.items():
                    try:
                        while queue and len(flying[node]) < window:
                            index, mine, cols = queue.popleft()
                            flying[node].append((index, mine))
                            suffix = suffixes[node]
                            pipe = self._pools.pipe(node)
                            job = jobs[index]
                            if job.quiet:
                                pipe.send(job.build(sent(mine, names), suffix))
                                continue
                            build = (
                                job.replacing if node in replacing and job.replacing else job.build
                            )
                            pipe.send(
                                build(sent(mine, names, suffix), *job.on(cols, pipe.connect()))
                            )
                    except CacheUnavailable:
                        failed(node)
                for node, in_flight in flying.items():
                    if not in_flight:
                        continue
                    index, mine = in_flight[0]
                    pipe = self._pools.pipe(node)
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
                                replies = replies.replace(NOT_STORED, STORED)
                        done.append(Answered(index, pipe, mine, replies))
                    except CacheUnavailable:
                        failed(node)
                    else:
                        in_flight.popleft()
        except BaseException:
            # Not a server's failure (a caller's bad value, an interrupt): replies still in
            # flight would answer the next exchange on these pipes, so they are closed.
            for node, in_flight in flying.items():
                if in_flight:
                    self._pools.pipe(node).close()
            raise
        for node in router.outlived(suffixes):
            again: deque[_Queued] = deque((a.job, a.keys, []) for a in done if a.pipe.name == node)
            done = [answered for answered in done if answered.pipe.name != node]
            unanswered(node, again, uses[node])
        router.hold(held | router.revoke(lost))
        if placement is not None and router.trust.ring.current() is not placement:
            self._unplaced(jobs, done, placement)
        if unwritten:
            raise KeysMoving("memcached ring: keys written are moving between servers")
        return done

    def _unplaced(self, jobs: Sequence[Job], done: list[Answered], placement: Placement) -> None:
        """The ring lease this exchange was placed under ran out before its end: the values
        read of keys that are not on the same server under the same name in the record read
        again (moving, moved, moved back under a new name), or whose place this process
        cannot know now, are made misses (in place). A process may have sent its reads just
        before the next state began, or been paused past whole changes, and a copy left
        behind by a move misses the writes made since (memcache/ring.py). Writes need no
        such check: the edge store write that each follows was made under the lease."""
        now = self._router.placement()
        if now is placement:
            return
        for at, answered in enumerate(done):
            if not jobs[answered.job].values:
                continue
            keys = answered.keys
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
            kept = [item if ok else None for ok, item in zip(same, answered.replies, strict=True)]
            done[at] = answered._replace(replies=kept)
