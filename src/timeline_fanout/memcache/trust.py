"""Which memcached servers a process may use, and under which epoch: failover without stale items.

A server that refuses, times out or hangs is **down** for this process for ``retry_s``
(doubled after each failed probe, up to 8 times); no request is sent to it meanwhile, and the
first request after that probes it. Its keys are then
**unavailable**: reads miss them, and writes to them are not sent (the callers see what a server
that evicts everything at once would answer, which every layer above already handles, and the
read paths answer such keys from the edge store).

A write that a server did not take (not sent, or sent and not answered) leaves its items stale.
They must never be served again, however the server comes back (restarted empty, resumed after
SIGSTOP, reachable again after a partition). So every item is stored under its server's
**epoch**: the cluster appends ``@{epoch}`` to each key it sends to that server. The epoch is
not kept on the server itself but by its **guards**, the next one or two servers in ring order
(key ``fanout:epoch:{server}``, read and written directly on each guard):

- a process uses a server only under a **lease**: all of its guards that answer hold the same
  epoch (and at least one answers), read less than ``lease_s`` ago;
- a process that could not write to a server **revokes** its epoch: it writes
  ``revoked:{random}`` to every guard it reaches, and does not return from the write (so its
  batch does not commit) until ``lease_s`` has passed since it first saw that same revocation
  in force (the same random values on the same guards): by then every lease taken before the
  revocation has run out, and no process reads the stale items;
- a process that finds a server with no agreed epoch probes it, and if it answers gives it a
  **fresh** epoch (compare-and-swap on every guard, so a concurrent revocation wins). Items
  under the old epoch are never asked for again: they are garbage that expires.

A fresh epoch makes the server look empty, which every layer already survives (an eviction).
A guard that lost its copy (restarted) makes the copies disagree: the server gets a fresh
epoch (never the other guard's copy, which may have missed a revocation). A revocation is
written to every guard that answers, probing those this process had left alone. One server
alone has no guard and no epoch: it is used as it is, and when it is down writes fail
(``CacheUnavailable``), as they must, since nowhere else could record the revocation; with two
servers, each is the other's only guard, so writes to one fail while the other is down.

This module holds the state (pure, one per process, shared by the blocking and the event-loop
clients); the cluster does the I/O.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from timeline_fanout.memcache.ring import RingRecord, RingView

__all__ = ["REVOKED", "Lease", "ServerTrust", "TrustSettings", "epoch_key"]

REVOKED = b"revoked"  # the prefix of a revocation's value: b"revoked:{random}"
EPOCH_PREFIX = b"fanout:epoch:"


def epoch_key(server: str) -> bytes:
    """The key, on each of ``server``'s guards, of its epoch."""
    return EPOCH_PREFIX + server.encode("ascii")


@dataclass(frozen=True, slots=True)
class TrustSettings:
    """The bounds of failover (docs/design/cache-failover.md).

    Attributes:
        timeout_s: a server that has not answered a request within this is down (connect and
            each read); no request waits on a server longer.
        retry_s: a down server is left alone this long, then probed by the next request.
        lease_s: how long an epoch read from the guards is used without reading it again; a
            revocation holds its writer this long.
    """

    timeout_s: float = 1.0
    retry_s: float = 2.0
    lease_s: float = 1.0


@dataclass(frozen=True, slots=True)
class Lease:
    """A server's epoch as its guards held it at ``taken`` (monotonic seconds)."""

    epoch: bytes
    taken: float


class ServerTrust:
    """Per server: down until when, its lease, and since when this process has seen it
    revoked. Not thread-safe on its own: the cluster calls it under its lock."""

    def __init__(
        self,
        servers: Sequence[str],
        settings: TrustSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
        new_epoch: Callable[[], bytes] = lambda: secrets.token_hex(4).encode("ascii"),
        ring: RingView | None = None,
    ) -> None:
        self.ring = ring or RingView(RingRecord.of(servers))
        self.settings = settings or TrustSettings()
        self.clock = clock
        self.new_epoch = new_epoch
        self._down_until: dict[str, float] = {}
        self._failed_probes: dict[str, int] = {}
        self._leases: dict[str, Lease] = {}
        self._revoked_seen: dict[str, tuple[float, tuple[bytes | None, ...]]] = {}

    @classmethod
    def of(cls, servers: Sequence[tuple[str, int]], timeout: float | None) -> ServerTrust:
        """A process's trust in ``servers`` with the default bounds (``timeout``, if given, as
        ``timeout_s``): what a client makes when it is given none to share."""
        bounds = TrustSettings() if timeout is None else TrustSettings(timeout_s=timeout)
        return cls([f"{host}:{port}" for host, port in servers], bounds)

    @property
    def servers(self) -> list[str]:
        """The servers this process may use in its ring state (memcache/ring.py): while the
        ring moves, those of both versions."""
        return _used(self.ring.record)

    @property
    def guarded(self) -> bool:
        """Whether epochs are in use (two servers or more)."""
        return len(self.servers) > 1

    def guards(self, server: str) -> list[str]:
        """The next one (two servers) or two servers after ``server`` in ring order. While the
        ring moves, its guards in both versions: a process still stable at the old version
        reads and revokes on the old guards, one already stable at the new version on the new
        ones, and a moving process, which meets both, on all of them."""
        found: list[str] = []
        for ring in _rings_used(self.ring.record):
            found += [g for g in _ring_guards(ring, server) if g not in found]
        return found

    def new_guards(self, server: str) -> list[str]:
        """While the ring moves, ``server``'s guards in the new version that do not guard it in
        the old one: they hold no copy of its epoch yet, and are given the old guards' agreed
        copy rather than a fresh epoch, which would make the server look empty."""
        record = self.ring.record
        if not record.moving:
            return []
        old = _ring_guards(record.rings[-2], server)
        return [g for g in _ring_guards(record.rings[-1], server) if old and g not in old]

    # -- down and up ---------------------------------------------------------------------------

    def mark_down(self, server: str) -> None:
        """Down for ``retry_s``, doubled for each probe in a row it failed (at most 8 times
        ``retry_s``): a hung server costs one request a timeout per interval, and the
        intervals grow while it stays hung."""
        failed = self._failed_probes.get(server, -1) + 1
        self._failed_probes[server] = failed
        backoff = self.settings.retry_s * min(8, 2**failed)
        self._down_until[server] = self.clock() + backoff
        self._leases.pop(server, None)

    def mark_up(self, server: str) -> None:
        self._down_until.pop(server, None)
        self._failed_probes.pop(server, None)

    def is_down(self, server: str) -> bool:
        """Down and not yet due for a probe."""
        until = self._down_until.get(server)
        return until is not None and self.clock() < until

    def was_down(self, server: str) -> bool:
        """Marked down at some point and not seen answering since (a probe is due)."""
        return server in self._down_until

    # -- leases --------------------------------------------------------------------------------

    def epoch(self, server: str) -> bytes | None:
        """The suffix of ``server``'s keys under a live lease (``b""`` without guards), or None
        when the server may not be used until its guards are read (or it is down)."""
        if not self.guarded:
            return None if self.is_down(server) else b""
        if server in self._down_until:
            return None
        lease = self._leases.get(server)
        if lease is None or self.clock() - lease.taken >= self.settings.lease_s:
            return None
        return b"@" + lease.epoch

    def lease(self, server: str, epoch: bytes, taken: float) -> None:
        self._leases[server] = Lease(epoch, taken)
        self._revoked_seen.pop(server, None)

    def drop_lease(self, server: str) -> None:
        self._leases.pop(server, None)

    def agreed(self, copies: Sequence[bytes | None]) -> bytes | None:
        """The epoch all answering guards hold (None: missing, revoked or disagreeing)."""
        if not copies or any(c is None or c.startswith(REVOKED) for c in copies):
            return None
        first = copies[0]
        return first if all(c == first for c in copies) else None

    # -- revocation ------------------------------------------------------------------------------

    def revocation(self) -> bytes:
        """A revocation's value: unique, so that a later revocation is told from this one."""
        return REVOKED + b":" + self.new_epoch()

    def revoked(self, server: str, copies: tuple[bytes | None, ...], at: float) -> float:
        """Record that ``server``'s guards hold the revocation ``copies`` as of ``at``; returns
        until when a writer that did not reach the server must hold its batch: ``lease_s``
        after the earliest moment this process knows this revocation was in force (the first
        time it saw these very copies), since a lease taken before that lasts at most
        ``lease_s``. Copies that changed (a fresh epoch, revoked again) start the wait anew."""
        self._leases.pop(server, None)
        seen = self._revoked_seen.get(server)
        first = seen[0] if seen is not None and seen[1] == copies else at
        self._revoked_seen[server] = (first, copies)
        return first + self.settings.lease_s


def _rings_used(record: RingRecord) -> tuple[tuple[str, ...], ...]:
    return record.rings[-2:] if record.moving else record.rings[-1:]


def _used(record: RingRecord) -> list[str]:
    return sorted({node for ring in _rings_used(record) for node in ring})


def _ring_guards(ring: Sequence[str], server: str) -> list[str]:
    """The next one (two servers) or two servers after ``server`` in ``ring``'s order; none
    when it is not in ``ring``."""
    if server not in ring:
        return []
    at = ring.index(server)
    count = min(2, len(ring) - 1)
    return [ring[(at + step) % len(ring)] for step in range(1, count + 1)]
