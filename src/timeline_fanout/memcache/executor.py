"""The blocking client's I/O: a batch's pipelines (memcache/exchange.py) run as one pipelined
exchange per server, all servers at once. ``Executor.run`` sends a server's pipelines in sends
of at most ``PIPELINE`` keyed commands (each quiet pipeline's closing ``mn`` besides, whose reply
is four bytes; consecutive small pipelines, of any jobs, in one write: a
batch of many small jobs, as a fan-out of posts with a few followers each, costs a system
call and a wait per send, not per job and server), keeps at most ``WINDOW`` sends unanswered
per server, and reads the replies back in order: while one server's replies are read, the
others work through what is queued, across jobs. A server that fails mid-exchange
is marked down and its pipelines answered as a server holding nothing would (``Exchange``
decides what that costs the batch).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any, NamedTuple

from timeline_fanout.memcache.exchange import PIPELINE, Exchange, Job, Pipeline
from timeline_fanout.memcache.pools import ServerPipe, ServerPools
from timeline_fanout.memcache.ring import MOVED, Placement
from timeline_fanout.memcache.router import Router
from timeline_fanout.memcache.wire import CacheUnavailable

__all__ = ["WINDOW", "Answered", "Executor"]

# Sends to one server before its first replies are read: two keep the server busy while the
# client reads and builds, and (each at most ``PIPELINE`` commands) bound unread replies.
WINDOW = 2


class Answered(NamedTuple):
    """One pipeline's replies: its job's index, the pipe that parses them (its server's), the
    keys (as the caller named them) and the replies (raw lines, the values read, or a quiet
    job's ``(replies, suffix, keys renamed)``)."""

    job: int
    pipe: ServerPipe
    keys: list[bytes]
    replies: Any


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
        server not up in the record holds the batch until older leases ran out. Replies the
        record no longer vouches for once they are in (``Exchange.outlived``) are dropped the
        same way.

        A key moving between servers (memcache/ring.py) is read as missing; a write to one is
        not sent, and raises ``KeysMoving`` once the rest is done: the writer's batch
        must wait for this process's next ring state, and is made again then. With
        ``best_effort`` (``Exchange``) such a write is answered as refused instead, and a
        write not sent is neither missed nor held (a write sent and not answered still
        revokes: a hung server may take it late)."""
        router = self._router
        exchange = Exchange(router, jobs, router.lease(), best_effort)
        queues = exchange.queues
        window = 1 if any(job.values for job in jobs) else WINDOW
        # Per server, the sends unanswered, each its pipelines not yet read, in order.
        flying: dict[str, deque[deque[Pipeline]]] = {node: deque() for node in queues}
        done: list[Answered] = []

        def failed(node: str) -> None:
            self._pools.pipe(node).close()  # its replies unread: the connection is unusable
            router.trust.mark_down(node)
            unread = [pipeline for sent in flying[node] for pipeline in sent]
            exchange.failed(node, [*unread, *queues[node]])
            flying[node].clear()
            queues[node].clear()

        try:
            while any(queues.values()) or any(flying.values()):
                for node, queue in queues.items():
                    try:
                        while queue and len(flying[node]) < window:
                            sending = _send(queue)
                            flying[node].append(sending)
                            pipe = self._pools.pipe(node)
                            connection = pipe.connect()
                            pipe.send(
                                b"".join([exchange.payload(node, p, connection) for p in sending])
                            )
                    except CacheUnavailable:
                        failed(node)
                for node, in_flight in flying.items():
                    if not in_flight:
                        continue
                    sent, pipe = in_flight[0], self._pools.pipe(node)
                    try:
                        while sent:
                            pipeline = sent[0]
                            done.append(self._answer(exchange, node, pipe, pipeline))
                            sent.popleft()
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
        for node in exchange.outlived():
            again = [Pipeline(a.job, a.keys, []) for a in done if a.pipe.name == node]
            done = [answered for answered in done if answered.pipe.name != node]
            exchange.unanswered(node, again, exchange.uses[node])
        done += [
            Answered(
                u.job, self._pools.pipe(u.node) if u.node else self._nowhere, u.keys, u.replies
            )
            for u in exchange.unsent
        ]
        exchange.commit()
        placement = exchange.placement
        if placement is not None and router.trust.ring.current() is not placement:
            self._unplaced(jobs, done, placement)
        return done

    @staticmethod
    def _answer(exchange: Exchange, node: str, pipe: ServerPipe, pipeline: Pipeline) -> Answered:
        """The replies of ``pipeline``, the next unread on ``pipe``."""
        job = exchange.jobs[pipeline.job]
        if job.quiet:
            suffix = exchange.suffixes[node]
            replies: Any = (pipe.receive_quiet(), suffix, exchange.renamed(pipeline.keys))
        elif job.values:
            replies = pipe.receive_values(len(pipeline.keys))
        else:
            replies = exchange.read(node, pipeline, pipe.receive(len(pipeline.keys)))
        return Answered(pipeline.job, pipe, pipeline.keys, replies)

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


def _send(queue: deque[Pipeline]) -> deque[Pipeline]:
    """The next send from a server's ``queue``: its first pipeline and those after it while
    the send stays within ``PIPELINE`` keyed commands (a quiet pipeline's ``mn`` not counted:
    its reply is four bytes), so the window bounds unread replies as one pipeline each would."""
    sending = deque([queue.popleft()])
    commands = len(sending[0].keys)
    while queue and commands + len(queue[0].keys) <= PIPELINE:
        commands += len(queue[0].keys)
        sending.append(queue.popleft())
    return sending
