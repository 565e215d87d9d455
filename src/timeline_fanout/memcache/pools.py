"""Connections to memcached servers: one blocking pipe per server, made by an injected factory.

A ``ServerPipe`` is one server's connection for pipelines (``send`` pipelines, then ``receive``
their replies in order). ``ServerPools`` holds one per server name, made on first use by the
``Connect`` factory it was given: the cluster names servers as the ring record does, and the
factory decides what a name connects to (a TCP address by default; tests give connections that
fail or answer late at a step they choose, with no subclass of the cluster). A pipe that fails
closes itself and raises ``CacheUnavailable``; the next use connects afresh.
"""

from __future__ import annotations

import itertools
import socket
from collections.abc import Callable, Sequence
from typing import NoReturn

from timeline_fanout.memcache.wire import (
    NO_CAS_ID,
    QUIET_END,
    STORED,
    TOO_LARGE,
    CacheUnavailable,
    Item,
    Outcome,
    quiet_end,
    take_values,
)

_OUTCOMES = {
    b"STORED": Outcome.STORED,
    b"NOT_STORED": Outcome.NOT_STORED,
    b"EXISTS": Outcome.EXISTS,
    b"NOT_FOUND": Outcome.NOT_FOUND,
    TOO_LARGE: Outcome.TOO_LARGE,
    b"HD": Outcome.STORED,  # meta delete: deleted
    b"EX": Outcome.EXISTS,  # meta delete: CAS mismatch
    b"NF": Outcome.NOT_FOUND,  # meta delete: no such item
}

# Connections numbered across the process, so a token read on one pipe never passes on another.
_CONNECTIONS = itertools.count(1)


def cas_on(tokens: Sequence[bytes], connection: int) -> list[bytes]:
    """The CAS ids to send on ``connection`` for ``tokens`` (``Item.cas``: ``id/connection``).
    A restarted server counts its CAS ids from 1 again, so an id read before the restart can
    name a new item of the same key; any restart closes the connection it was read on. A token
    read on another connection is therefore sent as ``NO_CAS_ID``: its write answers EXISTS
    (or NOT_FOUND), as for an item changed since it was read."""
    current = b"/%d" % connection
    cut = len(current)
    return [t[: len(t) - cut] if t.endswith(current) else NO_CAS_ID for t in tokens]


class ServerPipe:
    """One server's connection for pipelines: ``send`` pipelines, then ``receive`` their
    replies in the same order. Replies are read in whole lines, so a read that brings the start
    of the next pipeline's replies keeps it for the next ``receive``."""

    def __init__(self, host: str, port: int, timeout: float, name: str = "") -> None:
        self.name = name or f"{host}:{port}"
        self._address = (host, port)
        self._timeout = timeout
        self._sock: socket.socket | None = None
        self._connection = 0
        self._unread = b""

    def connect(self) -> int:
        """The number of the open connection, opened if there is none (``cas_on``)."""
        self._socket()
        return self._connection

    def send(self, payload: bytes) -> None:
        sock = self._socket()
        try:
            sock.sendall(payload)
        except OSError as exc:
            self._fail(str(exc))

    def _socket(self) -> socket.socket:
        if self._sock is None:
            try:
                self._sock = socket.create_connection(self._address, self._timeout)
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError as exc:
                self._fail(str(exc))
            self._connection = next(_CONNECTIONS)
        return self._sock

    def receive(self, lines: int) -> bytes:
        """The next ``lines`` reply lines, ``\\r\\n`` included."""
        chunks = [self._unread]
        seen = self._unread.count(b"\n")
        while seen < lines:
            chunks.append(self._recv(1 << 20))
            seen += chunks[-1].count(b"\n")
        data = b"".join(chunks)
        if seen == lines:
            self._unread = b""
            return data
        self._unread = data.split(b"\n", lines)[-1]  # the next pipeline's first replies
        return data[: len(data) - len(self._unread)]

    def receive_values(self, count: int) -> list[Item | None]:
        """The replies to ``count`` meta gets with flags ``v c t`` (see ``meta_get_pipeline``):
        an ``Item`` for a hit, None for a miss (``take_values`` parses them)."""
        buf, pos = self._unread, 0
        found: list[Item | None] = []
        stamp = b"/%d" % self._connection
        while True:
            try:
                pos, need = take_values(buf, pos, count, found, stamp=stamp)
            except ValueError as exc:
                self._fail(str(exc))
            if not need:
                break
            buf, pos = self._more(buf, pos, need)
        self._unread = buf[pos:]
        return found

    def receive_quiet(self) -> bytes:
        """The replies of one quiet pipeline (see ``quiet_append_pipeline``) up to its ``MN``,
        which is left out: the refusals, one line each (``refusals`` parses them)."""
        buf, pos = self._unread, 0
        while (end := quiet_end(buf, pos)) < 0:
            buf, pos = self._more(buf, pos, len(buf) - pos + 1)
        self._unread = buf[end:]
        return buf[pos : end - len(QUIET_END)]

    def refusals(self, replies: bytes, suffix: bytes) -> list[bytes]:
        """The keys a quiet append pipeline's ``replies`` (``receive_quiet``) say were not
        stored, without the ``suffix`` they were sent with. Any other reply (an error) closes
        the connection and raises: it is not known which command it answered."""
        if not replies:  # the common case: everything stored
            return []
        keys = []
        cut = len(suffix)
        for line in replies.split(b"\r\n")[:-1]:
            key = line[4:]
            if not line.startswith(b"NS k") or not key.endswith(suffix):
                self._fail(f"unexpected quiet append reply {line[:200]!r}")
            keys.append(key[: len(key) - cut])
        return keys

    def _more(self, buf: bytes, pos: int, need: int) -> tuple[bytes, int]:
        """``buf[pos:]`` grown to at least ``need`` bytes by reading the socket."""
        chunks = [buf[pos:]]
        have = len(chunks[0])
        while have < need:
            chunks.append(self._recv(max(need - have, 1 << 16)))
            have += len(chunks[-1])
        return b"".join(chunks), 0

    def _recv(self, size: int) -> bytes:
        """One read; a closed or failing connection raises ``CacheUnavailable``."""
        if self._sock is None:
            self._fail("nothing was sent")
        try:
            chunk = self._sock.recv(size)
        except OSError as exc:
            self._fail(str(exc))
        if not chunk:
            self._fail("connection closed")
        return chunk

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = None
        self._unread = b""

    def _fail(self, reason: str) -> NoReturn:
        self.close()
        raise CacheUnavailable(f"memcached {self.name}: {reason}")

    def reply_lines(self, replies: bytes, allowed: bytes = b"") -> list[bytes]:
        """Reply lines without terminators; an error reply (other than ``allowed``) closes the
        connection and raises."""
        lines = replies.split(b"\r\n")[:-1]
        for line in lines:
            if line.startswith((b"ERROR", b"CLIENT_ERROR", b"SERVER_ERROR")) and line != allowed:
                self._fail(line[:200].decode("ascii", "replace"))
        return lines

    def outcomes(self, replies: bytes, count: int) -> list[Outcome]:
        """Per command of a store, CAS or meta-delete pipeline, its outcome. "Object too large"
        is an answer about the item, not a broken connection (memcached reads and drops the
        value and goes on), so it is returned, not raised."""
        if replies == STORED * count:  # the common case, checked at C speed
            return [Outcome.STORED] * count
        lines = self.reply_lines(replies, allowed=TOO_LARGE)
        try:
            return [_OUTCOMES[line] for line in lines]
        except KeyError:
            self._fail(f"unexpected store reply in {sorted(set(lines) - set(_OUTCOMES))[:3]}")


Connect = Callable[[str], ServerPipe]
"""Makes the pipe of the server a name stands for (not connected yet: it connects on use)."""


def tcp(timeout: float) -> Connect:
    """Pipes to ``host:port`` names, each read waiting at most ``timeout`` seconds."""

    def connect(node: str) -> ServerPipe:
        host, port = node.rsplit(":", 1)
        return ServerPipe(host, int(port), timeout)

    return connect


class ServerPools:
    """One pipe per server name, made by ``connect`` when a name is first used (a server a
    newer ring record names is connected on its first request)."""

    def __init__(self, connect: Connect) -> None:
        self._connect = connect
        self._pipes: dict[str, ServerPipe] = {}

    def pipe(self, node: str) -> ServerPipe:
        pipe = self._pipes.get(node)
        if pipe is None:
            pipe = self._pipes[node] = self._connect(node)
        return pipe

    def command(self, node: str, line: bytes) -> bytes:
        """One command of one reply line (``version``, ``flush_all``, ``mn``), the line
        without its terminator; ``CacheUnavailable`` if the server does not answer it."""
        pipe = self.pipe(node)
        pipe.send(line)
        return pipe.receive(1)[:-2]

    def answers(self, node: str) -> bool:
        """Whether ``node`` answers now (``mn``, the meta no-op); a server stopped with
        SIGSTOP accepts the connection and times out here."""
        try:
            if self.command(node, b"mn\r\n") == b"MN":
                return True
        except CacheUnavailable:
            return False
        self.pipe(node).close()
        return False

    def close(self) -> None:
        for pipe in self._pipes.values():
            pipe.close()
