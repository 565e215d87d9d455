"""Meta gets from an event loop: the HTTP API's warm timeline reads, without a thread.

A request thread pays for its hop twice (handing the request over, and the GIL it waits for
after each socket call while the loop holds it), and under load the hops were most of a read's
latency (README Performance). Here a read is sent from the loop itself on one connection per
server, shared by every request of the process: each request writes its pipeline of meta gets
and awaits a future; replies come back in the order the pipelines were written, so the
connection's reader hands them out in that order. Under load one socket read brings the replies
of several requests, so a read costs less than one system call per request.

Placement is ``MemcacheCluster``'s (the same ``RendezvousRing``), commands are the same meta
gets (``meta_get_pipeline``) and replies are parsed by the same ``take_values``, so an item read
here is the item the blocking client would have read.

**Failures.** A connection that closes, answers out of protocol, or leaves its oldest request
unanswered for ``timeout`` seconds is aborted, and every request waiting on it gets
``CacheUnavailable`` (nothing about their keys is known); the next request connects afresh. A
request whose caller went away (its future cancelled) still has its replies read and dropped,
so the replies of the requests behind it stay in step.

Why not aiomcache (aio-libs): it speaks only the classic text commands (``gets`` has no time
to live, which ``Item`` carries), one server per client, and parses through ``StreamReader``
line by line; what is needed here is one pipelined command per server and a parser this
package already has.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from graph.cache import RendezvousRing
from graph.memcache_pipe import CacheUnavailable, Item, meta_get_pipeline, take_values

_epochs = itertools.count(1)
# Keys whose server is remembered (~150 bytes each), forgotten all at once when full.
REMEMBERED_KEYS = 1 << 17


class Versioned(NamedTuple):
    """Items read, with the epochs of the connections that read them (one per server asked, in
    ring order). A connection lives inside one run of its server, and a server gives every
    change of an item a CAS id it never gave before in that run, so the same key with the same
    CAS id read on connections of the same epochs is the same bytes: a version that survives
    a restart of memcached (which starts its CAS ids again at 1) only as a miss."""

    found: dict[bytes, Item]
    epochs: tuple[int, ...]


class _Waiting:
    __slots__ = ("count", "found", "future", "sent")

    def __init__(self, future: asyncio.Future[list[Item | None]], count: int) -> None:
        self.future = future
        self.count = count
        self.found: list[Item | None] = []
        self.sent = time.monotonic()


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
        self.epoch = next(_epochs)  # unique in the process: see ``Versioned``

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # a stream transport (TCP)

    def request(self, payload: bytes, count: int) -> asyncio.Future[list[Item | None]]:
        """Queues ``payload`` (``count`` meta gets) for the next write. The write happens once
        the loop has run what is ready now: every request of this turn of the loop goes out in
        one system call (a write cost more than the rest of a warm read, README Performance)."""
        loop = asyncio.get_running_loop()
        waiting = _Waiting(loop.create_future(), count)
        if self.closed:  # lost before this request: nothing would ever answer it
            waiting.future.set_exception(CacheUnavailable(f"memcached {self.name}: closed"))
            return waiting.future
        self._waiting.append(waiting)
        self._unsent.append(payload)
        if len(self._unsent) == 1:
            loop.call_soon(self._write)
        if self._watchdog is None:
            self._watchdog = loop.call_later(self._timeout, self._check)
        return waiting.future

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
                pos, need = take_values(buf, pos, head.count, head.found)
                if need:
                    break
                self._waiting.popleft()
                if not head.future.done():  # its caller may have gone
                    head.future.set_result(head.found)
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
        while self._waiting:
            future = self._waiting.popleft().future
            if not future.done():
                future.set_exception(CacheUnavailable(f"memcached {self.name}: {reason}"))

    def close(self) -> None:
        if self._transport is not None and not self.closed:
            self._transport.close()


class _Abandoned(Exception):
    """The request making a connection went away before it was made."""


def _retrieved(future: asyncio.Future[list[Item | None]]) -> None:
    if not future.cancelled():
        future.exception()


class AsyncMemcache:
    """Meta gets over several servers from one event loop (only that loop may use it)."""

    def __init__(self, servers: Iterable[tuple[str, int]], timeout: float = 2.0) -> None:
        self._addresses = {f"{host}:{port}": (host, port) for host, port in servers}
        if not self._addresses:
            raise ValueError("no memcached servers configured")
        self._ring = RendezvousRing(list(self._addresses))
        self._timeout = timeout
        self._connections: dict[str, _Connection] = {}
        self._connecting: dict[str, asyncio.Future[_Connection]] = {}
        self._owners: dict[bytes, int] = {}

    async def gets_many(self, keys: Sequence[bytes]) -> dict[bytes, Item]:
        """As ``MemcacheCluster.gets_many``."""
        return (await self.gets_versioned(keys)).found

    async def gets_versioned(self, keys: Sequence[bytes]) -> Versioned:
        """The items, and the epochs of the connections that read them. Every server's
        pipeline is written before any reply is awaited, so the servers answer in parallel."""
        unique = list(dict.fromkeys(keys))
        asked: list[tuple[list[bytes], asyncio.Future[list[Item | None]]]] = []
        epochs: list[int] = []
        for node, mine in self._split(unique):
            if mine:
                connection = self._connections.get(node)
                if connection is None or connection.closed:
                    connection = await self._connect(node)
                asked.append((mine, connection.request(meta_get_pipeline(mine), len(mine))))
                epochs.append(connection.epoch)
        found: dict[bytes, Item] = {}
        try:
            for mine, future in asked:
                replies = await future
                found.update((k, v) for k, v in zip(mine, replies, strict=True) if v is not None)
        except BaseException:
            for _, future in asked:  # another server's failure is not news to anyone
                future.add_done_callback(_retrieved)
            raise
        return Versioned(found, tuple(epochs))

    def _split(self, keys: list[bytes]) -> list[tuple[str, list[bytes]]]:
        """Per server, its keys; a key's server is remembered (a read asks for the same few
        keys of a user every time, and placing one costs a hash per server)."""
        owners = self._owners
        unknown = [k for k in keys if k not in owners]
        if unknown:
            if len(owners) + len(unknown) > REMEMBERED_KEYS:
                owners.clear()
            owners.update(zip(unknown, self._ring.owners(unknown), strict=True))
        split: list[tuple[str, list[bytes]]] = [(node, []) for node in self._ring.nodes]
        for key in keys:
            split[owners[key]][1].append(key)
        return split

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
