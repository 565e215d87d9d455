"""Pipelined memcached commands for batches of keys: store commands, INCR, DELETE, meta gets.

pymemcache sends a batch of store commands in one write only through a private method, reads a
multi-get server by server, and builds and parses every key's command in Python with checks that
cost more client time than memcached needs to execute it (~4 µs a key, measured). A fan-out
writes one token to thousands of keys and the graph consumer reads and writes two lists per
event, so here a whole pipeline is built by one ``bytes.join`` and sent in one write, and every
reply is read back and returned (never ``noreply``: the outcome of each write matters). Keys
reach this module already validated. Reads use meta gets (``mg key v c``: one reply per key, in
order, so a reply needs no key to be matched).
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import NoReturn

STORED = b"STORED\r\n"
NOT_STORED = b"NOT_STORED"
STORE_REPLIES = frozenset({b"STORED", NOT_STORED})


class CacheUnavailable(RuntimeError):
    """A memcached server did not answer, or answered out of protocol; nothing about the keys
    on it is known, and the connection is closed so the next call starts clean."""


class ServerPipe:
    """One server's connection for pipelines: ``send`` pipelines, then ``receive`` their
    replies in the same order. Replies are read in whole lines, so a read that brings the start
    of the next pipeline's replies keeps it for the next ``receive``."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.name = f"{host}:{port}"
        self._address = (host, port)
        self._timeout = timeout
        self._sock: socket.socket | None = None
        self._unread = b""

    def send(self, payload: bytes) -> None:
        try:
            if self._sock is None:
                self._sock = socket.create_connection(self._address, self._timeout)
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock.sendall(payload)
        except OSError as exc:
            self._fail(str(exc))

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

    def receive_values(self, count: int) -> list[tuple[bytes, bytes] | None]:
        """The replies to ``count`` meta gets with flags ``v c`` (see ``meta_get_pipeline``):
        ``(value, cas id)`` for a hit, None for a miss. Values are read by their announced
        length, so they may hold any bytes."""
        buf = self._unread
        pos = 0
        found: list[tuple[bytes, bytes] | None] = []
        while len(found) < count:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                buf, pos = self._more(buf, pos, len(buf) - pos + 1)
                continue
            if buf.startswith(b"EN", pos) and eol == pos + 2:
                found.append(None)
                pos = eol + 2
                continue
            head = buf[pos:eol].split()
            if (
                len(head) != 3
                or head[0] != b"VA"
                or not head[1].isdigit()
                or not head[2].startswith(b"c")
            ):
                self._fail(f"unexpected meta get reply {buf[pos:eol][:200]!r}")
            end = eol + 2 + int(head[1])
            if len(buf) < end + 2:
                buf, pos = self._more(buf, pos, end + 2 - pos)
                continue
            found.append((buf[eol + 2 : end], head[2][1:]))
            pos = end + 2
        self._unread = buf[pos:]
        return found

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

    def reply_lines(self, replies: bytes) -> list[bytes]:
        """Reply lines without terminators; an error reply closes the connection and raises."""
        lines = replies.split(b"\r\n")[:-1]
        for line in lines:
            if line.startswith((b"ERROR", b"CLIENT_ERROR", b"SERVER_ERROR")):
                self._fail(line[:200].decode("ascii", "replace"))
        return lines

    def stored(self, replies: bytes, count: int) -> list[bool]:
        """Per command of a store pipeline: True STORED, False NOT_STORED."""
        if replies == STORED * count:  # the common case, checked at C speed
            return [True] * count
        lines = self.reply_lines(replies)
        if not STORE_REPLIES.issuperset(lines):
            self._fail(f"unexpected store reply in {sorted(set(lines) - STORE_REPLIES)[:3]}")
        return [line == b"STORED" for line in lines]


def store_pipeline(
    command: bytes, keys: Sequence[bytes], values: Sequence[bytes], expire: int
) -> bytes:
    return b"".join(
        [
            b"%s %s 0 %d %d\r\n%s\r\n" % (command, k, expire, len(v), v)
            for k, v in zip(keys, values, strict=True)
        ]
    )


def same_value_pipeline(command: bytes, keys: Sequence[bytes], value: bytes) -> bytes:
    """One value stored under many keys: the whole pipeline is a single join."""
    head = command + b" "
    tail = b" 0 0 %d\r\n%s\r\n" % (len(value), value)
    return head + (tail + head).join(keys) + tail


def line_pipeline(command: bytes, keys: Sequence[bytes], rest: Sequence[bytes]) -> bytes:
    """``command key`` and the rest of each line (arguments with their leading space)."""
    return b"".join([b"%s %s%s\r\n" % (command, k, r) for k, r in zip(keys, rest, strict=True)])


def meta_get_pipeline(keys: Sequence[bytes]) -> bytes:
    """``mg key v c`` per key: one reply per key, in order, with the value and its CAS id."""
    return b"mg " + b" v c\r\nmg ".join(keys) + b" v c\r\n"
