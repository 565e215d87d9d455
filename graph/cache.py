"""Memcached over several servers, batched and pipelined, with typed results.

Why not ``HashClient``: it defaults to noreply (so ``add``/``append`` report success for writes
that stored nothing), and on failures it drops a server from the ring, silently remapping its keys
to another server and back again later, which resurrects stale lists. Here keys are placed with the
same rendezvous hash ``HashClient`` uses, every write waits for its reply, and a server that does
not answer raises ``CacheUnavailable`` for the caller's retry policy to handle.

Store commands and INCR/TOUCH go through ``ServerPipe`` (one write per pipeline, every server's
pipeline sent before any reply is read); reads, CAS and deletes through pymemcache's clients.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import mmh3
from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheError

from graph.memcache_pipe import (
    CacheUnavailable,
    ServerPipe,
    line_pipeline,
    same_value_pipeline,
    store_pipeline,
)

__all__ = ["PIPELINE", "CacheUnavailable", "MemcacheCluster", "RendezvousRing"]

# memcached stops reading a connection whose replies are not being read, so one huge write
# would deadlock against its own replies: pipelines are cut at this many commands.
PIPELINE = 2000


class RendezvousRing:
    """``HashClient``'s placement (pymemcache's ``RendezvousHash`` with murmur3 seed 0: a key
    goes to the node with the greatest ``murmur3(f"{node}-{key}")``, a tie to the greater node
    name), computed for a whole batch of keys at once with mmh3's C murmur3."""

    def __init__(self, nodes: Sequence[str]) -> None:
        self.nodes = sorted(nodes)  # rank = position: a tie goes to the higher rank
        self._prefixes = [node.encode("ascii") + b"-" for node in self.nodes]

    def owners(self, keys: Sequence[bytes]) -> list[int]:
        """The index in ``nodes`` of each key's server."""
        count = len(self.nodes)
        if count == 1:
            return [0] * len(keys)
        hash_ = mmh3.hash
        scores = [
            [hash_(prefix + key, 0, False) * count + rank for key in keys]
            for rank, prefix in enumerate(self._prefixes)
        ]
        return [best % count for best in map(max, *scores)]

    def group(self, keys: Sequence[bytes]) -> list[list[int]]:
        """Positions in ``keys`` per node."""
        groups: list[list[int]] = [[] for _ in self.nodes]
        for position, owner in enumerate(self.owners(keys)):
            groups[owner].append(position)
        return groups


class MemcacheCluster:
    def __init__(self, servers: Iterable[tuple[str, int]], timeout: float = 2.0) -> None:
        self._clients: dict[str, Client] = {}
        self._pipes: dict[str, ServerPipe] = {}
        for host, port in servers:
            name = f"{host}:{port}"
            self._clients[name] = Client(
                (host, port),
                connect_timeout=timeout,
                timeout=timeout,
                default_noreply=False,
                no_delay=True,
            )
            self._pipes[name] = ServerPipe(host, port, timeout)
        if not self._clients:
            raise ValueError("no memcached servers configured")
        self._ring = RendezvousRing(list(self._clients))

    @property
    def servers(self) -> list[str]:
        return list(self._clients)

    def server_for(self, key: bytes) -> str:
        return self._ring.nodes[self._ring.owners([key])[0]]

    def _by_server(self, keys: Iterable[bytes]) -> list[tuple[str, list[bytes]]]:
        """Keys grouped by server, at most PIPELINE per group."""
        keys = list(keys)
        return [
            (self._ring.nodes[node], [keys[p] for p in positions[i : i + PIPELINE]])
            for node, positions in enumerate(self._ring.group(keys))
            for i in range(0, len(positions), PIPELINE)
        ]

    def _pipelined(
        self, keys: Sequence[bytes], build: Callable[[list[int]], bytes]
    ) -> list[tuple[ServerPipe, list[int], bytes]]:
        """Send ``build(positions)`` for groups of keys, one pipeline per server in flight;
        return each group's positions in ``keys`` with its raw replies."""
        queues = [
            [positions[i : i + PIPELINE] for i in range(0, len(positions), PIPELINE)]
            for positions in self._ring.group(keys)
        ]
        pipes = [self._pipes[node] for node in self._ring.nodes]
        done: list[tuple[ServerPipe, list[int], bytes]] = []
        for round_ in range(max(map(len, queues), default=0)):
            sent = [(pipes[n], q[round_]) for n, q in enumerate(queues) if round_ < len(q)]
            for pipe, positions in sent:
                pipe.send(build(positions))
            done += [(pipe, positions, pipe.receive(len(positions))) for pipe, positions in sent]
        return done

    def _call(self, server: str, method: str, *args: Any) -> Any:
        client = self._clients[server]
        try:
            return getattr(client, method)(*args)
        except (TimeoutError, OSError, MemcacheError) as exc:
            client.close()
            raise CacheUnavailable(f"memcached {server}: {exc}") from exc

    def get_many(self, keys: Iterable[bytes]) -> dict[bytes, bytes]:
        found: dict[bytes, bytes] = {}
        for server, group in self._by_server(keys):
            found.update(self._call(server, "get_many", group))
        return found

    def gets_many(self, keys: Iterable[bytes]) -> dict[bytes, tuple[bytes, bytes]]:
        """Values with their CAS ids, for reads that may turn into a compaction."""
        found: dict[bytes, tuple[bytes, bytes]] = {}
        for server, group in self._by_server(keys):
            found.update(self._call(server, "gets_many", group))
        return found

    def _store(
        self, command: bytes, values: Mapping[bytes, bytes], expire: int = 0
    ) -> dict[bytes, bool]:
        keys = list(values)
        data = list(values.values())

        def build(positions: list[int]) -> bytes:
            return store_pipeline(
                command, [keys[p] for p in positions], [data[p] for p in positions], expire
            )

        stored: dict[bytes, bool] = {}
        for pipe, positions, replies in self._pipelined(keys, build):
            stored.update(
                zip([keys[p] for p in positions], pipe.stored(replies, len(positions)), strict=True)
            )
        return stored

    def add_many(self, values: Mapping[bytes, bytes], expire: int = 0) -> dict[bytes, bool]:
        """True where the key was created; False where it already existed."""
        return self._store(b"add", values, expire)

    def append_many(self, values: Mapping[bytes, bytes]) -> dict[bytes, bool]:
        """False is NOT_STORED: the key is missing *or* the item would pass the size limit."""
        return self._store(b"append", values)

    def append_to_all(self, keys: Sequence[bytes], value: bytes) -> list[bytes]:
        """APPEND one value to many keys (one post to its followers' timelines): the keys
        answered NOT_STORED, as in ``append_many``."""

        def build(positions: list[int]) -> bytes:
            return same_value_pipeline(b"append", [keys[p] for p in positions], value)

        refused: list[bytes] = []
        for pipe, positions, replies in self._pipelined(keys, build):
            stored = pipe.stored(replies, len(positions))
            refused += [keys[p] for p, ok in zip(positions, stored, strict=True) if not ok]
        return refused

    def set_many(self, values: Mapping[bytes, bytes]) -> None:
        self._store(b"set", values)

    def cas(self, key: bytes, value: bytes, cas_id: bytes) -> bool | None:
        """True stored, False lost the race, None the key is gone."""
        result: bool | None = self._call(self.server_for(key), "cas", key, value, cas_id, 0, False)
        return result

    def _lines(self, command: bytes, args: Mapping[bytes, bytes]) -> dict[bytes, bytes]:
        keys = list(args)
        data = list(args.values())

        def build(positions: list[int]) -> bytes:
            return line_pipeline(
                command, [keys[p] for p in positions], [data[p] for p in positions]
            )

        replies: dict[bytes, bytes] = {}
        for pipe, positions, raw in self._pipelined(keys, build):
            replies.update(zip([keys[p] for p in positions], pipe.reply_lines(raw), strict=True))
        return replies

    def incr_many(self, deltas: Mapping[bytes, int]) -> dict[bytes, int | None]:
        """New values, None where the counter does not exist."""
        replies = self._lines(b"incr", {k: b"%d" % d for k, d in deltas.items()})
        return {k: None if v == b"NOT_FOUND" else int(v) for k, v in replies.items()}

    def exists_many(self, keys: Iterable[bytes]) -> dict[bytes, bool]:
        """TOUCH with exptime 0 (ours never expire): tells a missing key without its value."""
        replies = self._lines(b"touch", dict.fromkeys(keys, b"0"))
        return {k: v == b"TOUCHED" for k, v in replies.items()}

    def delete_many(self, keys: Iterable[bytes]) -> None:
        for server, group in self._by_server(keys):
            self._call(server, "delete_many", group)

    def flush_all(self) -> None:
        for server in self._clients:
            self._call(server, "flush_all", 0, False)

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        for pipe in self._pipes.values():
            pipe.close()
