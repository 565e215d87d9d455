"""Meta gets from an event loop: the HTTP API's warm timeline reads, without a thread.

A request thread pays for its hop twice (handing the request over, and the GIL it waits for after
each socket call while the loop holds it), and under load the hops were most of a read's latency
(docs/decisions/event-loop-reads.md). Here a read is sent from the loop itself on one connection per
server, shared by every request of the process: each request writes its pipeline of meta gets and
awaits a future; replies come back in the order the pipelines were written, so the connection's
reader hands them out in that order. Under load one socket read brings the replies of several
requests, so a read costs less than one system call per request.

Planning is the blocking client's: the same ``Exchange`` (memcache/exchange.py) splits the
keys by server under the same names and epochs into the same pipelines, and the same
``Router`` judges the replies once they are in, using only what never waits (the live lease,
never a read of the record or a probe). Commands are the same meta gets
(``meta_get_pipeline``, asking for values alone: these reads never write back, so they need no
CAS id or time to live) and replies are parsed by the same ``take_values``, so an item read
here is the item the blocking client would have read. What differs is the I/O alone,
and that a read here that cannot be answered whole raises (the blocking client answers it).

**Unchanged replies are not parsed.** A caller may pass the replies an earlier call with the
same keys got (``gets_replies``): a server's replies that begin with exactly those bytes are
taken whole, in one comparison, and the caller is told they are the same (the page memo,
graph/timelines/page_memo.py, answers from that). Parsing is deterministic on the bytes, so bytes
equal to a whole earlier reply sequence end where it ended and say what it said. The comparison is
made only at the start of a part's replies, never on a part already half parsed.

**Failures.** A connection that closes, answers out of protocol, or leaves its oldest request
unanswered for ``timeout`` seconds is aborted, and every request waiting on it gets
``CacheUnavailable`` (nothing about their keys is known); the next request connects afresh. A
request whose caller went away (its future cancelled) still has its replies read and dropped,
so the replies of the requests behind it stay in step.

Why not aiomcache (aio-libs): it speaks only the classic text commands, one server per client,
and parses through ``StreamReader`` line by line; what is needed here is one pipelined command
per server, its replies as sent, and a parser this package already has.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from timeline_fanout.memcache.exchange import Exchange, Job
from timeline_fanout.memcache.ring import Placement, RingRecord
from timeline_fanout.memcache.router import Lease, Router
from timeline_fanout.memcache.trust import ServerTrust
from timeline_fanout.memcache.wire import CacheUnavailable, Item, meta_get_pipeline, take_values

# Keys held by remembered multi-GET plans (keys per server, and their commands: a warm read asks
# for the same keys of a user every time). A plan holds its keys and their meta gets: 110-250
# bytes a key by tracemalloc (the most with few keys a plan and 64-character ids), so at most
# ~32 MiB; all forgotten at once past this. A plan of more keys than a 64th of it is not kept.
REMEMBERED_PLAN_KEYS = 1 << 17


class Replies(NamedTuple):
    """A multi-GET of ``keys``: its replies exactly as the servers sent them, one ``bytes`` per
    server asked (in ring order), and the items they hold; ``found`` is None when the replies
    are those of the ``earlier`` call the caller passed (then nothing was parsed: the caller
    knows what they say). Values alone are asked for (no CAS id, no time to live), so the
    replies are the same bytes exactly when the values are."""

    keys: tuple[bytes, ...]
    raw: tuple[bytes, ...]
    found: dict[bytes, Item] | None
    ring: RingRecord | None = None  # the ring the keys were placed by (memcache/ring.py)

    def unparsed(self) -> Replies:
        """What to keep for a later call: the keys and the bytes, not the items."""
        return Replies(self.keys, self.raw, None, self.ring)


class _Part(NamedTuple):
    """One server's share of a multi-GET."""

    node: str
    keys: list[bytes]
    payload: bytes  # their meta gets, each key with the server's epoch suffix
    suffix: bytes  # that suffix (memcache/trust.py): a plan is stale once it changes
    placement: Placement | None = None  # the ring it was placed by: stale once that changes


class _Call:
    """One multi-GET over several servers. Its future completes once, when the last server's
    replies are in (the caller's task wakes once, however many servers it asked) or with the
    first failure; a server answering after that, or after the caller went away, is dropped."""

    __slots__ = ("future", "left")

    def __init__(self, future: asyncio.Future[None], parts: int) -> None:
        self.future = future
        self.left = parts

    def answered(self) -> None:
        self.left -= 1
        if self.left == 0 and not self.future.done():
            self.future.set_result(None)

    def failed(self, error: CacheUnavailable) -> None:
        if not self.future.done():
            self.future.set_exception(error)


class _Waiting:
    """A part of a call, written to one connection and waiting for its ``count`` replies:
    ``expected`` (if any) is taken whole when the replies begin with it, and parsed onto
    ``found`` otherwise; ``raw`` collects what was parsed, if the caller wants the replies."""

    __slots__ = ("call", "count", "expected", "found", "raw", "same", "sent")

    def __init__(self, call: _Call, count: int, expected: bytes | None, keep: bool) -> None:
        self.call = call
        self.count = count
        self.expected = expected
        self.found: list[Item | None] = []
        self.raw: list[bytes] | None = [] if keep else None
        self.same = False  # the replies were ``expected``, taken whole
        self.sent = time.monotonic()

    def replies(self) -> bytes:
        """The replies as sent (only for a part made with ``keep``, or taken whole)."""
        if self.same and self.expected is not None:
            return self.expected
        return b"".join(self.raw or ())


class _Connection(asyncio.Protocol):
    """One server's connection: pipelines go out in order, replies are handed out in order."""

    def __init__(self, name: str, timeout: float) -> None:
        self.name = name
        self._timeout = timeout
        self._transport: asyncio.Transport | None = None
        self._unsent: list[bytes] = []  # requests of this turn of the loop, written at its end
        self._chunks: list[bytes] = []  # what arrived and is not handed out yet
        self._have = 0
        self._need = 1  # bytes needed before the next reply can be parsed
        self._waiting: deque[_Waiting] = deque()
        self._watchdog: asyncio.TimerHandle | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # a stream transport (TCP)

    def request(self, payload: bytes, waiting: _Waiting) -> None:
        """Queues ``payload`` (``waiting.count`` meta gets) for the next write. The write
        happens once the loop has run what is ready now: every request of this turn of the loop
        goes out in one system call (a write cost more than the rest of a warm read,
        docs/decisions/event-loop-reads.md)."""
        if self.closed:  # lost before this request: nothing would ever answer it
            waiting.call.failed(CacheUnavailable(f"memcached {self.name}: closed"))
            return
        self._waiting.append(waiting)
        self._unsent.append(payload)
        loop = waiting.call.future.get_loop()  # the caller's: no second lookup per part
        if len(self._unsent) == 1:
            loop.call_soon(self._write)
        if self._watchdog is None:
            self._watchdog = loop.call_later(self._timeout, self._check)

    def _write(self) -> None:
        unsent, self._unsent = self._unsent, []
        if not self.closed and self._transport is not None:
            self._transport.write(b"".join(unsent))

    def data_received(self, data: bytes) -> None:
        self._chunks.append(data)
        self._have += len(data)
        if self._have < self._need:
            return  # a value still arriving: parsed once it is all here
        buf = data if len(self._chunks) == 1 else b"".join(self._chunks)
        pos = 0
        try:
            while self._waiting:
                head = self._waiting[0]
                expected = head.expected
                # Only at the start of a part's replies (a part half parsed goes on parsing):
                # the same bytes as last time are the same replies, nothing to parse.
                if expected is not None and not head.found and buf.startswith(expected, pos):
                    pos += len(expected)
                    head.same = True
                else:
                    start = pos
                    pos, need = take_values(buf, pos, head.count, head.found, writable=False)
                    if head.raw is not None:
                        head.raw.append(buf[start:pos])
                    if need:
                        break
                self._waiting.popleft()
                head.call.answered()
            else:
                need = 1
                if pos < len(buf):
                    raise ValueError("a reply nobody asked for")
        except ValueError as exc:
            self._abort(str(exc))
            return
        rest = buf[pos:]
        self._chunks = [rest] if rest else []
        self._have = len(rest)
        self._need = need

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_all(f"connection lost ({exc or 'closed by the server'})")

    def _check(self) -> None:
        """Every ``timeout`` while requests wait: abort if the oldest has waited that long."""
        self._watchdog = None
        if not self._waiting or self.closed:
            return
        waited = time.monotonic() - self._waiting[0].sent
        if waited >= self._timeout:
            self._abort(f"no reply within {self._timeout} s")
            return
        self._watchdog = asyncio.get_running_loop().call_later(self._timeout - waited, self._check)

    def _abort(self, reason: str) -> None:
        if self._transport is not None:
            self._transport.abort()
        self._fail_all(reason)

    def _fail_all(self, reason: str) -> None:
        self.closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        while self._waiting:  # an error each: a raised exception collects its traceback
            call = self._waiting.popleft().call
            call.failed(CacheUnavailable(f"memcached {self.name}: {reason}"))

    def close(self) -> None:
        if self._transport is not None and not self.closed:
            self._transport.close()


class _Abandoned(Exception):
    """The request making a connection went away before it was made."""


class AsyncMemcache:
    """Meta gets over several servers from one event loop (only that loop may use it)."""

    def __init__(
        self,
        servers: Iterable[tuple[str, int]],
        timeout: float | None = None,
        trust: ServerTrust | None = None,
    ) -> None:
        """``trust``: shared with the process's blocking clients (its own otherwise). A server
        that is down, or not up in the record under a live lease, is not asked here: the call
        raises ``CacheUnavailable``, and the caller reads through a blocking client, which
        goes around it."""
        self._addresses = {f"{host}:{port}": (host, port) for host, port in servers}
        if not self._addresses:
            raise ValueError("no memcached servers configured")
        self._trust = trust = trust or ServerTrust.of(list(self._addresses.values()), timeout)
        self._router = Router(trust)  # never probes: a due server is asked by its next read
        self._timeout = trust.settings.timeout_s
        self._connections: dict[str, _Connection] = {}
        self._connecting: dict[str, asyncio.Future[_Connection]] = {}
        self._plans: dict[tuple[bytes, ...], tuple[_Part, ...]] = {}
        self._plan_keys = 0  # keys held by ``_plans``

    async def gets_many(self, keys: Sequence[bytes]) -> dict[bytes, Item]:
        """As ``MemcacheCluster.gets_many`` (without time to live); its plan is not remembered
        (the round trips after a read's batch are one-off: a first read's shards, a newly
        followed celebrity)."""
        plan, parts, _ = await self._get(keys, None, remember=False)
        return _found(plan, parts)

    async def gets_replies(self, keys: Sequence[bytes], earlier: Replies | None = None) -> Replies:
        """The replies, and the items unless the replies are ``earlier``'s (a ``Replies`` this
        client returned). Only an earlier call of the same keys is compared with: the same keys
        have the same plan, so each part's earlier bytes hold exactly as many replies as the
        part has keys, which taking them whole relies on. The plan of ``keys`` is remembered
        for the next call with the same keys. Every server's pipeline is written before any
        reply is awaited, so the servers answer in parallel. Under another ring record the
        same keys are split otherwise, so ``earlier`` placed by another is not compared."""
        asked = keys if isinstance(keys, tuple) else tuple(keys)
        plan, parts, expected = await self._get(asked, earlier, remember=True)
        raw = tuple([part.replies() for part in parts])
        ring = plan[0].placement.record if plan and plan[0].placement else None
        if raw == expected:
            return Replies(asked, raw, None, ring)
        for part in parts:
            if part.same:  # taken whole while another part changed: parsed now
                take_values(part.replies(), 0, part.count, part.found, writable=False)
        return Replies(asked, raw, _found(plan, parts), ring)

    async def _get(
        self, keys: Sequence[bytes], earlier: Replies | None, remember: bool
    ) -> tuple[tuple[_Part, ...], list[_Waiting], tuple[bytes, ...] | None]:
        """The plan of ``keys``, per part of it its answered ``_Waiting``, and the replies of
        ``earlier`` it was compared with (None: not comparable, or no ``earlier``)."""
        asked = keys if isinstance(keys, tuple) else tuple(keys)
        if not asked:
            return (), [], None
        lease = self._lease()
        placement = lease.placement
        plan = self._plans.get(asked)
        if plan is None or plan[0].placement is not placement or self._unusable(plan, lease):
            plan = self._plan(asked, lease, remember)
        comparable = (
            earlier is not None and earlier.keys == asked and earlier.ring == placement.record
        )
        expected = earlier.raw if comparable and earlier is not None else None
        parts = await self._exchange(plan, expected, remember)
        if outlived := self._outlived(plan):  # the lease ran out, or the epoch changed, mid-read
            raise CacheUnavailable(f"memcached {outlived[0]}: its epoch changed mid-read")
        if self._trust.ring.current() is not placement:
            raise CacheUnavailable("memcached ring: its record changed or ran out mid-read")
        return plan, parts, expected

    def _lease(self) -> Lease:
        """Where keys are now and their epochs (memcache/ring.py); ``CacheUnavailable`` when
        this process's ring lease ran out (a blocking client reads the record again: this loop
        never waits on the shared place)."""
        lease = self._router.now()
        if lease is None:
            raise CacheUnavailable("memcached ring: no lease on the ring record")
        for node in lease.placement.nodes:
            if node not in self._addresses:
                host, port = node.rsplit(":", 1)
                self._addresses[node] = (host, int(port))
        return lease

    def _unusable(self, plan: tuple[_Part, ...], lease: Lease) -> bool:
        """Whether a part of a remembered ``plan`` goes to a server not readable now, or under
        another epoch: the plan is made again (and a read of such a server refused)."""
        for part in plan:
            use = self._router.use(part.node, lease.record)
            if not use.readable or use.suffix != part.suffix:
                return True
        return False

    def _outlived(self, plan: tuple[_Part, ...]) -> list[str]:
        """The servers of ``plan`` whose epoch changed since it was made, or that the live
        lease no longer covers (``Router.outlived``, without renewal)."""
        return self._router.outlived({p.node: p.suffix for p in plan}, renew=False)

    async def _exchange(
        self, plan: tuple[_Part, ...], expected: tuple[bytes, ...] | None, remember: bool
    ) -> list[_Waiting]:
        """Every part of ``plan`` sent, then all awaited; a server that fails is down. An empty
        plan is answered at once (a call with no part would never complete)."""
        if not plan:
            return []
        call = _Call(asyncio.get_running_loop().create_future(), len(plan))
        parts: list[_Waiting] = []
        try:
            for index, part in enumerate(plan):
                connection = self._connections.get(part.node)
                if connection is None or connection.closed:
                    connection = await self._connect(part.node)
                hoped = None if expected is None else expected[index]
                waiting = _Waiting(call, len(part.keys), hoped, keep=remember)
                connection.request(part.payload, waiting)
                parts.append(waiting)
            await call.future
        except CacheUnavailable as exc:
            for part in plan:  # the failing server's name leads the message
                if str(exc).startswith(f"memcached {part.node}:"):
                    self._trust.mark_down(part.node)
            if not call.future.cancel() and not call.future.cancelled():
                call.future.exception()
            raise
        except BaseException:
            # Parts already sent are answered to nobody; a failure already set is retrieved
            # (it is news to nobody: the caller gets the exception raised here).
            if not call.future.cancel() and not call.future.cancelled():
                call.future.exception()
            raise
        return parts

    def _plan(self, keys: tuple[bytes, ...], lease: Lease, remember: bool) -> tuple[_Part, ...]:
        """Per server (in ring order), its keys and their meta gets, planned as the blocking
        client plans them (``Exchange``); if ``remember``, kept for the next multi-GET of the
        same keys (placing a key costs a hash per server). A key moving between servers
        (memcache/ring.py), or on a server not readable now, makes the read
        ``CacheUnavailable``: the blocking client answers it."""
        job = Job(_meta_gets, list(dict.fromkeys(keys)), values=True)
        exchange = Exchange(self._router, [job], lease)
        if any(unsent.node is None for unsent in exchange.unsent):
            raise CacheUnavailable("memcached ring: a key read is moving between servers")
        uses = exchange.uses
        unusable = sorted(node for node, use in uses.items() if not use.readable)
        if unusable:
            raise CacheUnavailable(f"memcached {unusable[0]}: down, or no lease on its epoch")
        plan = tuple(
            _Part(
                node,
                [key for pipeline in queue for key in pipeline.keys],
                b"".join([exchange.payload(node, pipeline, 0) for pipeline in queue]),
                exchange.suffixes[node],
                lease.placement,
            )
            for node, queue in exchange.queues.items()
        )
        if remember and len(keys) <= REMEMBERED_PLAN_KEYS // 64:
            if self._plan_keys + len(keys) > REMEMBERED_PLAN_KEYS:
                self._plans.clear()
                self._plan_keys = 0
            self._plans[keys] = plan
            self._plan_keys += len(keys)
        return plan

    async def _connect(self, node: str) -> _Connection:
        """One connection per server, however many requests ask for it at once (if the one
        making it goes away, the next makes it)."""
        while (pending := self._connecting.get(node)) is not None:
            try:
                return await asyncio.shield(pending)
            except _Abandoned:
                continue
        loop = asyncio.get_running_loop()
        pending = self._connecting[node] = loop.create_future()
        host, port = self._addresses[node]
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(node, self._timeout), host, port),
                self._timeout,
            )
        except (OSError, TimeoutError) as exc:
            failed = CacheUnavailable(f"memcached {node}: {exc!r}")
            pending.set_exception(failed)
            pending.exception()  # retrieved: nobody else may be waiting
            raise failed from exc
        except BaseException:  # cancelled: those who joined must not wait forever
            pending.set_exception(_Abandoned())
            pending.exception()
            raise
        finally:
            del self._connecting[node]
        self._connections[node] = connection
        pending.set_result(connection)
        return connection

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()


def _meta_gets(keys: list[bytes]) -> bytes:
    """Meta gets asking for values alone: these reads never write back, so they need no CAS id
    or time to live."""
    return meta_get_pipeline(keys, writable=False)


def _found(plan: tuple[_Part, ...], parts: list[_Waiting]) -> dict[bytes, Item]:
    found: dict[bytes, Item] = {}
    for part, waiting in zip(plan, parts, strict=True):
        found.update((k, v) for k, v in zip(part.keys, waiting.found, strict=True) if v is not None)
    return found
