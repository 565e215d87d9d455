"""The raw limits: pipelined memcached text-protocol commands over plain sockets, no library.

``pipelined`` places keys on the same servers our client would use, so the two runs do the same
work. ``noreply_limit`` is the wire's limit on this machine: appends nobody checks."""

from __future__ import annotations

import socket
import time
from collections import defaultdict

from timeline_fanout.memcache.cluster import MemcacheCluster

PIPELINE = 1000


def _host_port(server: str) -> tuple[str, int]:
    host, _, port = server.rpartition(":")
    return host, int(port)


def pipelined(cluster: MemcacheCluster, command: bytes, values: dict[bytes, bytes]) -> float:
    """Send ``command key 0 0 len`` for every key, PIPELINE per write; seconds until the last
    reply. Every reply must be STORED."""
    by_server: dict[str, list[bytes]] = defaultdict(list)
    for key in values:
        by_server[cluster.server_for(key)].append(key)
    socks = {s: socket.create_connection(_host_port(s)) for s in by_server}
    started = time.perf_counter()
    for server, keys in by_server.items():
        sock = socks[server]
        for i in range(0, len(keys), PIPELINE):
            group = keys[i : i + PIPELINE]
            sock.sendall(
                b"".join(
                    b"%s %s 0 0 %d\r\n%s\r\n" % (command, k, len(values[k]), values[k])
                    for k in group
                )
            )
            buf = b""
            while buf.count(b"\r\n") < len(group):
                buf += sock.recv(1 << 20)
            if buf.count(b"STORED\r\n") - buf.count(b"NOT_STORED\r\n") != len(group):
                raise RuntimeError(f"raw {command!r} not stored: {buf[:80]!r}")
    elapsed = time.perf_counter() - started
    for sock in socks.values():
        sock.close()
    return elapsed


NOREPLY_APPENDS = 1_000_000
TOKEN = b"+0001700000000000/author/p1 "


def noreply_limit(server: tuple[str, int], count: int = NOREPLY_APPENDS) -> float:
    """Appends per second to one server when no outcome is read: ``count`` pipelined
    ``append … noreply`` of a timeline token to items that exist, each pipeline built by one
    join (as fast as a client can build it), closed by ``mn`` (its ``MN`` comes once all are
    executed). The creation of the items is not timed; they are deleted after."""
    keys = [b"noreply-limit:%d" % i for i in range(count)]
    with socket.create_connection(server) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _noreply(sock, keys, b"set ", b" 0 0 0 noreply\r\n\r\n")
        started = time.perf_counter()
        _noreply(sock, keys, b"append ", b" 0 0 %d noreply\r\n%s\r\n" % (len(TOKEN), TOKEN))
        elapsed = time.perf_counter() - started
        _noreply(sock, keys, b"delete ", b" noreply\r\n")
    return count / elapsed


def _noreply(sock: socket.socket, keys: list[bytes], head: bytes, tail: bytes) -> None:
    """``head key tail`` for every key, PIPELINE per write, then ``mn``: returns at its ``MN``."""
    for i in range(0, len(keys), PIPELINE):
        sock.sendall(head + (tail + head).join(keys[i : i + PIPELINE]) + tail)
    sock.sendall(b"mn\r\n")
    buf = b""
    while not buf.endswith(b"MN\r\n"):
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise RuntimeError(f"memcached {sock.getpeername()} closed the connection")
        buf += chunk
    if buf != b"MN\r\n":
        raise RuntimeError(f"noreply commands answered: {buf[:80]!r}")
