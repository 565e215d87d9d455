"""One batch of commands across the servers, everything but the I/O: which pipelines go to
which server under which names, what the commands that are not sent answer, and what the
replies are worth once they are in. The blocking client's executor (memcache/executor.py) and
the event loop's client (memcache/async_cluster.py) both plan with it and judge with it; they
differ only in how bytes reach a server and come back.

A ``Job`` is the commands of one kind for many keys (how to build a pipeline for a slice of
them, and how an unreachable server would have answered them). An ``Exchange`` places every
job's keys under one lease (``Router.split``), cuts each server's share into ``Pipeline``s of
at most ``PIPELINE`` commands, and decides per server what the router says (``ServerUse``): a
key is sent under its server's epoch suffix, an ADD is not sent where nothing may be created, a
SET goes as REPLACE to a returning server, and a server that is unusable is answered as a
server holding nothing would answer (``Unsent``). A write that a server did not take is noted
(``lost``: its epoch is revoked by ``commit``), and a write to a server not up in the record
holds the batch (``held``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from timeline_fanout.memcache.pools import cas_on
from timeline_fanout.memcache.ring import EpochState, ServerEpoch
from timeline_fanout.memcache.router import Lease, Router, Split, sent
from timeline_fanout.memcache.trust import ServerUse
from timeline_fanout.memcache.wire import NOT_STORED, STORED, KeysMoving

__all__ = ["PIPELINE", "Exchange", "Job", "Pipeline", "Unsent"]

# memcached stops reading a connection whose replies are not being read, so one huge write
# would deadlock against its own replies: pipelines are cut at this many commands.
PIPELINE = 2000


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

    def unanswered(self, keys: Sequence[bytes]) -> Any:
        """The replies of the commands for ``keys`` to an unavailable server; a quiet job's
        refuses every key, as a quiet append to a server holding nothing would."""
        if self.values:
            return [None] * len(keys)
        if self.quiet:
            return b"".join([b"NS k%s\r\n" % k for k in keys]), b"", {}
        return (self.absent or b"EN\r\n") * len(keys)


class Pipeline(NamedTuple):
    """Up to ``PIPELINE`` commands of one job for one server: the job's index, the keys (as
    the caller named them) and the entries of each column that go with them."""

    job: int
    keys: list[bytes]
    columns: list[list[Any]]


class Unsent(NamedTuple):
    """Commands answered without a server's reply: the job's index, the server (None for keys
    moving between servers), the keys and the replies a server holding nothing would give."""

    job: int
    node: str | None
    keys: list[bytes]
    replies: Any


class Exchange:
    """One batch of ``jobs`` under ``lease`` (None: this process cannot know where keys are,
    so every key is answered as moving). ``queues``: per server, the pipelines to send, in
    order; ``suffixes``: each one's epoch suffix. With ``best_effort`` (a reader's fills,
    fenced CAS and drops) a write to a moving key is answered as refused instead of raising,
    and a write not sent is no missed write, nor held: no commit follows it.

    Invariant: a pipeline is sent only to a server in ``queues``, under its suffix, and is
    either answered by it or handed back through ``unanswered``."""

    __slots__ = (
        "best_effort",
        "held",
        "jobs",
        "lease",
        "lost",
        "names",
        "placement",
        "queues",
        "replacing",
        "router",
        "suffixes",
        "unsent",
        "unwritten",
        "uses",
    )

    def __init__(
        self, router: Router, jobs: Sequence[Job], lease: Lease | None, best_effort: bool = False
    ) -> None:
        self.router = router
        self.jobs = jobs
        self.lease = lease
        self.best_effort = best_effort
        self.placement = lease.placement if lease is not None else None
        self.names: dict[bytes, bytes] = {}  # keys sent under another name (memcache/ring.py)
        self.queues: dict[str, deque[Pipeline]] = {}
        self.unsent: list[Unsent] = []
        self.suffixes: dict[str, bytes] = {}
        self.uses: dict[str, ServerUse] = {}
        self.lost: dict[str, ServerEpoch] = {}  # servers that missed a write: its epoch
        self.held: dict[str, ServerEpoch] = {}  # servers not up in the record written to
        self.replacing: set[str] = set()  # servers a SET goes to as REPLACE
        self.unwritten = False  # a write to a key moving between servers was not sent
        self._place()
        self._decide()

    def _place(self) -> None:
        """Every job's keys split by server, each server's share cut into pipelines; keys
        moving answered as no server would."""
        placement = self.placement
        for index, job in enumerate(self.jobs):
            split = (
                self.router.split(placement, job.keys, job.columns)
                if placement
                else Split([], [*job.keys], {})
            )
            self.names.update(split.names)
            if split.moving:  # answered as no server: it holds nothing, keeps nothing
                self.router.moving()
                made_up = job.unanswered(split.moving)
                if self.best_effort and job.absent == STORED:  # refused: NOT_STORED
                    made_up = NOT_STORED * len(split.moving)
                self.unsent.append(Unsent(index, None, split.moving, made_up))
                self.unwritten = self.unwritten or (job.absent is not None and not self.best_effort)
            for node, keys, cols in split.routes:
                queue = self.queues.setdefault(node, deque())
                if len(keys) <= PIPELINE:  # the common case: one pipeline, nothing cut
                    queue.append(Pipeline(index, keys, cols))
                    continue
                queue.extend(
                    Pipeline(index, keys[i : i + PIPELINE], [c[i : i + PIPELINE] for c in cols])
                    for i in range(0, len(keys), PIPELINE)
                )

    def _decide(self) -> None:
        """Per server with pipelines, how it is used: not at all (answered as holding nothing),
        or under its suffix, with ADDs held back where nothing may be created."""
        jobs = self.jobs
        for node, queue in self.queues.items():
            assert self.lease is not None  # a server's queue is filled only under one
            use = self.uses[node] = self.router.use(node, self.lease.record)
            writes = any(jobs[p.job].absent for p in queue)
            if use.epoch.state is not EpochState.UP and writes and not self.best_effort:
                self.held[node] = use.epoch  # sent or skipped, until older leases ran out
            if use.suffix is None:
                skipped = use._replace(skip_is_missed=False) if self.best_effort else use
                self.unanswered(node, queue, skipped)
                queue.clear()
                continue
            self.suffixes[node] = use.suffix
            if use.replaces:
                self.replacing.add(node)
            if not use.creates and any(jobs[p.job].fills for p in queue):
                # No item is filled under an epoch before every process may create there: an
                # ADD is answered as a server that keeps nothing would, and is no missed write.
                adds = [p for p in queue if jobs[p.job].fills]
                kept = [p for p in queue if not jobs[p.job].fills]
                queue.clear()
                queue.extend(kept)
                self.unanswered(node, adds, use._replace(skip_is_missed=False))

    def payload(self, node: str, pipeline: Pipeline, connection: int) -> bytes:
        """``pipeline``'s bytes for ``node``, sent on its connection numbered ``connection``
        (CAS tokens read on another are sent as ``NO_CAS_ID``: ``pools.cas_on``)."""
        job = self.jobs[pipeline.job]
        suffix = self.suffixes[node]
        if job.quiet:
            return job.build(sent(pipeline.keys, self.names), suffix)
        build = job.replacing if node in self.replacing and job.replacing else job.build
        columns: Sequence[Sequence[Any]] = pipeline.columns
        if (at := job.cas_column) is not None:
            columns = [*columns[:at], cas_on(columns[at], connection), *columns[at + 1 :]]
        return build(sent(pipeline.keys, self.names, suffix), *columns)

    def read(self, node: str, pipeline: Pipeline, replies: bytes) -> bytes:
        """A line-per-command pipeline's ``replies`` as the caller reads them: a SET sent as
        REPLACE to a server keeping nothing counts as stored there."""
        job = self.jobs[pipeline.job]
        if node in self.replacing and job.replacing:
            return replies.replace(NOT_STORED, STORED)
        return replies

    def renamed(self, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        """Of ``keys``, those sent under another name, by that name (a quiet job's refusals
        name what was sent)."""
        names = self.names
        return {names[k]: k for k in keys if k in names} if names else {}

    def unanswered(self, node: str, pipelines: Sequence[Pipeline], use: ServerUse) -> None:
        """``pipelines`` of ``node`` answered as a server holding nothing would (not sent, or
        sent and not answered): noted in ``lost`` if one of them wrote, unless ``use`` says a
        skip there is no missed write."""
        for pipeline in pipelines:
            job = self.jobs[pipeline.job]
            replies = job.unanswered(pipeline.keys)
            self.unsent.append(Unsent(pipeline.job, node, pipeline.keys, replies))
            self.router.unanswered(node, use)
            if use.skip_is_missed and job.absent is not None:
                self.lost[node] = use.epoch

    def failed(self, node: str, pipelines: Sequence[Pipeline]) -> None:
        """``node`` failed with ``pipelines`` (its queue and those in flight) unanswered: no
        more is sent to it, and they are answered as a server holding nothing would. Its
        suffix stays: the pipelines it answered before failing are judged by ``outlived``
        like any reply (a late reply from a revoked epoch is no better for the failure that
        followed it)."""
        self.unanswered(node, pipelines, self.uses[node])

    def outlived(self, renew: bool = True) -> list[str]:
        """The servers whose replies are not to be used: the record gives them another epoch
        than they were sent under (``Router.outlived``)."""
        return self.router.outlived(self.suffixes, renew)

    def commit(self) -> None:
        """The record told of the writes servers missed, and the batch held until no older
        lease reads what they missed (``Router.revoke``, ``Router.hold``); ``KeysMoving`` if
        a write to a key moving between servers was not sent (the writer's batch is made again
        under this process's next ring state)."""
        self.router.hold(self.held | self.router.revoke(self.lost))
        if self.unwritten:
            raise KeysMoving("memcached ring: keys written are moving between servers")
