"""Reads per key, as memcached saw them: ``watch fetchers`` on every server while a load runs.

A key that every request reads is a hot key that no number of servers spreads, and a server
that holds it gates every read. This counts each key's fetches on the servers themselves (not
what the client meant to ask), so a benchmark can state the hottest key's share of requests.
memcached drops log lines a watcher cannot keep up with and says how many (``skipped=``):
those are reported, never guessed.
"""

from __future__ import annotations

import re
import socket
import threading
import urllib.parse
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

_KEY = re.compile(rb" key=(\S+) ")
_SKIPPED = re.compile(rb"skipped=(\d+)")


@dataclass
class KeyFetches:
    """What the watchers counted: fetches per key (its server's epoch suffix removed) and the
    log lines memcached dropped."""

    per_key: Counter[bytes] = field(default_factory=Counter)
    skipped: int = 0

    def hottest(self, requests: int, top: int = 3) -> list[tuple[str, float]]:
        """The ``top`` keys and their fetches per request."""
        return [
            (key.decode(errors="replace"), round(n / max(requests, 1), 4))
            for key, n in self.per_key.most_common(top)
        ]


@contextmanager
def watching(servers: Sequence[tuple[str, int]]) -> Iterator[KeyFetches]:
    """Counts fetches on every server while the block runs (complete once it has left)."""
    fetches = KeyFetches()
    lock = threading.Lock()
    watchers = [socket.create_connection(address, timeout=5) for address in servers]
    for watcher in watchers:
        watcher.sendall(b"watch fetchers\r\n")
        if not watcher.recv(64).startswith(b"OK"):
            raise RuntimeError("memcached refused watch fetchers")
    stop = threading.Event()

    def follow(watcher: socket.socket) -> None:
        watcher.settimeout(0.2)
        rest = b""
        while True:
            try:
                chunk = watcher.recv(1 << 20)
            except TimeoutError:
                if stop.is_set():
                    return
                continue
            if not chunk:
                return
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            # The log escapes keys as URLs do ("|" is %7C, "@" %40).
            found = [urllib.parse.unquote_to_bytes(m[1]) for m in map(_KEY.search, lines) if m]
            keys = Counter(key.rpartition(b"@")[0] or key for key in found)
            dropped = sum(int(m.group(1)) for m in map(_SKIPPED.search, lines) if m)
            with lock:
                fetches.per_key.update(keys)
                fetches.skipped += dropped

    threads = [threading.Thread(target=follow, args=(w,), daemon=True) for w in watchers]
    for thread in threads:
        thread.start()
    try:
        yield fetches
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
        for watcher in watchers:
            watcher.close()
