"""The raw limit: pipelined memcached text-protocol commands over plain sockets, no library.

Keys are placed on the same servers our client would use, so the two runs do the same work."""

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
