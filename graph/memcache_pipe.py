"""Pipelined memcached commands that answer in one line: store commands, INCR, DELETE, meta get.

pymemcache sends a batch of store commands in one write only through a private method, and
builds each command with key checks and serialisation that cost more client time than memcached
needs to store it. A fan-out writes one token to thousands of keys, so here a whole pipeline is
built by one ``bytes.join`` and sent in one write; every reply is read back and returned (never
``noreply``: the outcome of each write matters). Keys reach this module already validated.
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
        if self._sock is None:
            self._fail("nothing was sent")
        chunks = [self._unread]
        seen = self._unread.count(b"\n")
        try:
            while seen < lines:
                chunk = self._sock.recv(1 << 20)
                if not chunk:
                    self._fail("connection closed")
                chunks.append(chunk)
                seen += chunk.count(b"\n")
        except OSError as exc:
            self._fail(str(exc))
        data = b"".join(chunks)
        if seen == lines:
            self._unread = b""
            return data
        self._unread = data.split(b"\n", lines)[-1]  # the next pipeline's first replies
        return data[: len(data) - len(self._unread)]

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
