"""Memcached over several servers, batched and pipelined, with typed results: the command API.

Why not ``HashClient``: it defaults to noreply (so ``add``/``append`` report success for writes
that stored nothing), and on failures it drops a server from the ring, silently remapping its keys
to another server and back again later, which resurrects stale lists. Here keys are placed with the
same rendezvous hash ``HashClient`` uses and every write waits for its reply. A server that does
not answer is down for a while and its keys are unavailable (memcache/trust.py): reads miss them,
writes to them are not sent and revoke the server's epoch in the shared record, so its items
are never served again; ``available`` tells the read paths which keys to answer from the edge
store. Only when nothing can record a revocation (the record cannot be read or written) does a
write raise ``CacheUnavailable`` for the caller's retry policy to handle.

The client is cut in three: connections (memcache/pools.py, made by an injected factory), the
router (memcache/router.py: placement, epochs, availability, revocations) and the executor
(memcache/executor.py: one pipelined exchange per server). This module turns each command into
jobs for the executor and its replies into typed results; it implements
``memcache.interface.Cache``, the Protocol the layers above are written against.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial

from timeline_fanout.memcache.exchange import Job
from timeline_fanout.memcache.executor import Executor
from timeline_fanout.memcache.pools import Connect, ServerPools, tcp
from timeline_fanout.memcache.router import Router
from timeline_fanout.memcache.trust import ServerTrust
from timeline_fanout.memcache.wire import (
    NOT_A_NUMBER,
    NOT_READ,
    NOT_STORED,
    QUIET_VALUE_MAX,
    STORED,
    AppendGroup,
    CacheUnavailable,
    Item,
    Outcome,
    Refused,
    cas_pipeline,
    line_pipeline,
    meta_get_pipeline,
    quiet_append_pipeline,
    same_value_pipeline,
    store_pipeline,
)

__all__ = [
    "CacheUnavailable",
    "Item",
    "MemcacheCluster",
    "Outcome",
    "Refused",
]

_GONE = b"NOT_FOUND\r\n"


def keep_ttl(ttl: int) -> int:
    """The expiry to write back for an item read with ``ttl`` seconds left (-1: none), so that
    a rewrite (CAS) never extends an item's life. An item read without its time to live (the
    event loop's reads, which never write) raises ``ValueError``: writing it back could make it
    immortal."""
    if ttl == NOT_READ:
        raise ValueError("an item read without its time to live cannot be written back")
    return 0 if ttl < 0 else max(ttl, 1)


def _cas_ids(ids: list[bytes]) -> list[bytes]:
    """``ids``, if each is one: an item read without its CAS id (``Item.cas`` empty) has no
    version to be written back against (memcached would refuse ``md key C`` with nothing
    after it as a client error, failing the whole batch)."""
    if not all(ids):
        raise ValueError("an item read without its CAS id cannot be written back")
    return ids


def _append_job(value: bytes, keys: Sequence[bytes]) -> Job:
    """``value`` appended to each of ``keys``: quiet where the value is short enough (see
    ``wire.QUIET_VALUE_MAX``). An unavailable server's appends are answered not stored."""
    if len(value) <= QUIET_VALUE_MAX:
        return Job(partial(_quiet_appends, value), keys, quiet=True, absent=NOT_STORED)
    return Job(partial(_classic_appends, value), keys, absent=NOT_STORED)


def _quiet_appends(value: bytes, keys: list[bytes], suffix: bytes) -> bytes:
    return quiet_append_pipeline(keys, suffix, value)


def _classic_appends(value: bytes, keys: list[bytes]) -> bytes:
    return same_value_pipeline(b"append", keys, value)


class MemcacheCluster:
    """A cluster of servers, each used only while it answers and under its epoch's lease
    (memcache/trust.py). ``trust`` may be shared with the process's other clients;
    ``connect`` makes a server's connection from its name (TCP to ``host:port`` by default);
    ``sleep`` is how this client waits; ``brings_back``: whether it brings servers back
    (``Router.advance``)."""

    def __init__(
        self,
        servers: Iterable[tuple[str, int]],
        timeout: float | None = None,
        trust: ServerTrust | None = None,
        connect: Connect | None = None,
        sleep: Callable[[float], None] = time.sleep,
        brings_back: bool = True,
    ) -> None:
        servers = list(servers)
        if not servers:
            raise ValueError("no memcached servers configured")
        self.trust = trust = trust or ServerTrust.of(servers, timeout)
        self._pools = ServerPools(connect or tcp(trust.settings.timeout_s))
        self.router = Router(trust, self._pools.answers, sleep, brings_back)
        self._executor = Executor(self.router, self._pools)
        self._best_effort = False

    def fills(self) -> MemcacheCluster:
        """This client for a reader's best-effort writes (fills, fenced CAS, drops): a write
        to a key moving between servers is answered as refused (ADD, SET: NOT_STORED; CAS,
        DELETE: NOT_FOUND) instead of raising ``KeysMoving``, so the reader goes on as if
        another had won the race, and answers from what it read. A write it does not send (its
        server down for this process) revokes nothing and holds nothing: no commit follows a
        reader's write. It shares this client's connections, router and ledger (the same
        thread uses both)."""
        fills = copy.copy(self)
        fills._best_effort = True
        return fills

    @property
    def servers(self) -> list[str]:
        """The servers of this process's ring state."""
        return self.trust.servers

    def available(self, keys: Sequence[bytes]) -> list[bool]:
        """Per key, whether its server may be read now (``Router.available``)."""
        return self.router.available(keys)

    def server_for(self, key: bytes) -> str:
        """The server ``key`` is on (``ValueError`` while it moves)."""
        return self.router.server_for(key)

    def checkpoint(self) -> int:
        return self.router.checkpoint()

    def missed(self, keys: Sequence[bytes], since: int) -> None:
        """A writer skipped ``keys`` (``Router.missed``)."""
        self.router.missed(keys, since)

    def settle(self) -> None:
        """Returns once every server is usable (``Router.settle``)."""
        self.router.settle()

    def wait(self, seconds: float) -> None:
        """Before asking again for items someone else is writing (a list being built). A
        client that must not block (graph/timelines/warm_reads.py) refuses instead."""
        self.router.wait(seconds)

    def gets_many(self, keys: Iterable[bytes]) -> dict[bytes, Item]:
        """Items with their CAS ids and time to live (for reads that may turn into a compaction
        or a commit); a missing key is left out."""
        job = Job(meta_get_pipeline, list(dict.fromkeys(keys)), values=True)
        found: dict[bytes, Item] = {}
        for _, _, mine, replies in self._executor.run([job], self._best_effort):
            found.update((k, v) for k, v in zip(mine, replies, strict=True) if v is not None)
        return found

    def get_many(self, keys: Iterable[bytes]) -> dict[bytes, bytes]:
        return {key: item.value for key, item in self.gets_many(keys).items()}

    def _outcomes(self, job: Job) -> dict[bytes, Outcome]:
        found: dict[bytes, Outcome] = {}
        for _, pipe, keys, replies in self._executor.run([job], self._best_effort):
            found.update(zip(keys, pipe.outcomes(replies, len(keys)), strict=True))
        return found

    def _store(
        self, command: bytes, values: Mapping[bytes, bytes], expire: int = 0
    ) -> dict[bytes, Outcome]:
        def build(keys: list[bytes], data: list[bytes]) -> bytes:
            return store_pipeline(command, keys, data, expire)

        def replace(keys: list[bytes], data: list[bytes]) -> bytes:
            return store_pipeline(b"replace", keys, data, expire)

        absent = NOT_STORED if command == b"append" else STORED
        job = Job(
            build,
            list(values),
            (list(values.values()),),
            absent=absent,
            fills=command == b"add",
            replacing=replace if command == b"set" else None,
        )
        return self._outcomes(job)

    def add_many(self, values: Mapping[bytes, bytes], expire: int = 0) -> dict[bytes, Outcome]:
        """STORED where the key was created; NOT_STORED where it already existed."""
        return self._store(b"add", values, expire)

    def append_many(self, values: Mapping[bytes, bytes]) -> dict[bytes, Outcome]:
        """NOT_STORED: the key is missing; TOO_LARGE: the item would pass the size limit
        (memcached also answers NOT_STORED for that when the item is already near the limit,
        so a NOT_STORED item may still exist: ``exists_many`` tells)."""
        return self._store(b"append", values)

    def append_to_each(self, groups: Sequence[AppendGroup]) -> list[Refused]:
        """APPEND each group's value to every key of the group (a post to its followers'
        timelines), all groups in one pipelined exchange: a ``Refused`` for each append that
        was not stored, as in ``append_many``, in the order of each server's pipelines. A
        value of at most ``QUIET_VALUE_MAX`` bytes (any token) goes by quiet meta sets, so
        only refusals are answered; a longer one by classic ``append``, which tells a value
        too large for the server (TOO_LARGE) from a missing item."""
        jobs = [_append_job(value, keys) for value, keys in groups]
        refused: list[Refused] = []
        for index, pipe, mine, replies in self._executor.run(jobs, self._best_effort):
            if jobs[index].quiet:
                raw, suffix, back = replies
                refused += [
                    Refused(index, back.get(k, k), Outcome.NOT_STORED)
                    for k in pipe.refusals(raw, suffix)
                ]
                continue
            outcomes = pipe.outcomes(replies, len(mine))
            refused += [
                Refused(index, k, o) for k, o in zip(mine, outcomes, strict=True) if not o.ok
            ]
        return refused

    def set_many(self, values: Mapping[bytes, bytes], expire: int = 0) -> dict[bytes, Outcome]:
        return self._store(b"set", values, expire)

    def cas_many(
        self, values: Mapping[bytes, tuple[bytes, bytes]], expire: int | Mapping[bytes, int] = 0
    ) -> dict[bytes, Outcome]:
        """``{key: (value, cas id)}``: STORED, EXISTS (changed since it was read), NOT_FOUND
        (gone) or TOO_LARGE, per key. ``expire``: one for all, or one per key."""
        keys = list(values)
        expires = [expire] * len(keys) if isinstance(expire, int) else [expire[k] for k in keys]
        pairs = list(values.values())
        columns = ([v for v, _ in pairs], _cas_ids([c for _, c in pairs]), expires)
        job = Job(cas_pipeline, keys, columns, absent=_GONE, cas_column=1)
        return self._outcomes(job)

    def cas(self, key: bytes, value: bytes, cas_id: bytes, expire: int = 0) -> Outcome:
        return self.cas_many({key: (value, cas_id)}, expire)[key]

    def delete_if_unchanged(self, items: Mapping[bytes, bytes]) -> dict[bytes, Outcome]:
        """``{key: cas id}``: delete each item only if it is still the one that was read (meta
        delete with C): a reader that found a list broken must not drop a newer, good one."""

        def build(keys: list[bytes], ids: list[bytes]) -> bytes:
            return line_pipeline(b"md", keys, [b" C" + c for c in ids])

        ids = (_cas_ids(list(items.values())),)
        return self._outcomes(Job(build, list(items), ids, absent=b"NF\r\n", cas_column=0))

    def _lines(
        self,
        command: bytes,
        args: Mapping[bytes, bytes],
        absent: bytes | None,
        allowed: bytes = b"",
    ) -> dict[bytes, bytes]:
        """``absent``: as in ``Job`` (None for a read); ``allowed``: an error reply that is an
        answer about the item, returned as the key's reply instead of raised."""

        def build(keys: list[bytes], data: list[bytes]) -> bytes:
            return line_pipeline(command, keys, data)

        job = Job(build, list(args), (list(args.values()),), absent=absent)
        replies: dict[bytes, bytes] = {}
        for _, pipe, keys, raw in self._executor.run([job], self._best_effort):
            replies.update(zip(keys, pipe.reply_lines(raw, allowed), strict=True))
        return replies

    def _count(self, command: bytes, deltas: Mapping[bytes, int]) -> dict[bytes, int | None]:
        """incr or decr; a counter holding anything but a number (bytes our writers never
        write) is deleted and answered as missing, so that its writer seeds it again from the
        shard, as after an eviction; a corrupt item must not fail every batch that counts on
        it until it expires."""
        args = {k: b" %d" % d for k, d in deltas.items()}
        replies = self._lines(command, args, _GONE, allowed=NOT_A_NUMBER)
        corrupt = [k for k, v in replies.items() if v == NOT_A_NUMBER]
        if corrupt:
            self.delete_many(corrupt)
        return {
            k: None if v in (b"NOT_FOUND", NOT_A_NUMBER) else int(v) for k, v in replies.items()
        }

    def incr_many(self, deltas: Mapping[bytes, int]) -> dict[bytes, int | None]:
        """New values, None where the counter does not exist (or held no number: it is
        deleted)."""
        return self._count(b"incr", deltas)

    def decr_many(self, deltas: Mapping[bytes, int]) -> None:
        """Counters shrunk (memcached stops at 0); a missing one stays missing, one that held
        no number is deleted."""
        self._count(b"decr", deltas)

    def exists_many(self, keys: Iterable[bytes]) -> dict[bytes, bool]:
        """Meta get without flags: a hit (HD) or a miss (EN), no value sent, and the item's
        expiry left alone (leases have one)."""
        replies = self._lines(b"mg", dict.fromkeys(keys, b""), None)
        return {k: v == b"HD" for k, v in replies.items()}

    def delete_many(self, keys: Iterable[bytes]) -> None:
        self._lines(b"delete", dict.fromkeys(keys, b""), _GONE)

    def versions(self) -> dict[str, str]:
        """The version of every server that answers: a readiness probe that touches no key.
        One server down is not an outage (its keys are gone around), so only when none
        answers is this ``CacheUnavailable`` (naming the first)."""
        found: dict[str, str] = {}
        failures: list[CacheUnavailable] = []
        self.router.placement()  # the record's servers, not only the configured ones
        for server in self.trust.servers:
            try:
                reply = self._pools.command(server, b"version\r\n")
            except CacheUnavailable as exc:
                failures.append(exc)
                continue
            found[server] = reply.removeprefix(b"VERSION ").decode("ascii", "replace")
        if not found:
            raise failures[0]
        return found

    def flush_all(self, servers: Sequence[str] | None = None) -> None:
        """Every item of every server (or of ``servers``) gone: an eviction of everything,
        which every layer survives (the epochs are in the record, not on the servers)."""
        if servers is None:
            self.router.placement()  # the record's servers, not only the configured ones
        for server in self.trust.servers if servers is None else servers:
            if self._pools.command(server, b"flush_all\r\n") != b"OK":
                raise CacheUnavailable(f"memcached {server}: flush_all not done")

    def close(self) -> None:
        self._pools.close()
