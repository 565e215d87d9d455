"""Which memcached servers a process may use, and under which epoch: failover without stale
items, decided by one register (docs/design/cache-register.md).

Two kinds of knowledge meet here, and only one of them decides what may be read:

- **Reachability, per process.** A server that refuses, times out or hangs is **down** for
  this process for ``retry_s`` (doubled after each failed probe, up to 8 times); no request is
  sent to it meanwhile, and the first request after that probes it. This only ever makes a
  process use a server *less*.
- **Validity, shared.** Every server's epoch and state live in the ring record
  (memcache/ring.py), the one linearizable register every process reads under a lease
  (``RingView``). Keys are sent as ``key@{epoch}``. A process that could not write to a server
  changes that server's epoch in the record to a new one in state ``DOWN`` by compare-and-set,
  and returns only a lease period after it first saw that change: every lease taken before it
  has run out by then, so no process reads the items that missed the write once its batch
  commits. A down server comes back through ``RETURNING`` (written under its new epoch, no item
  created) and is ``UP`` again a lease period later.

This module holds the state; the clients do the I/O.

**Threads.** One ``ServerTrust`` serves a whole process: the blocking clients of API and
consumer threads, the ring's renewal thread, and the event loop's client, which must never wait
on another thread's I/O. So:

- what a server's reachability is lives in one immutable ``_Down`` per server, in one dict,
  replaced whole: a reader without the lock sees one mark or the next, never half of each;
- the lock is taken only to read-modify-write a mark (``mark_down`` counts failed probes), for
  a few dict operations and never across I/O, so holding it costs the event loop nothing;
- the record's side is ``RingView``'s: its lock is held across reads of the shared place, and
  nothing the event loop calls takes it (``use``, ``suffix``, ``is_down``, ``mark_down`` read
  the record and lease last adopted, which are replaced whole).

A stale answer here only ever changes how much a process *uses* a server (one request sent to a
server just marked down times out); what may be read is decided by the record alone.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from timeline_fanout.memcache.ring import EpochState, RingRecord, RingView, ServerEpoch

__all__ = ["ServerTrust", "ServerUse", "TrustSettings"]


@dataclass(frozen=True, slots=True)
class TrustSettings:
    """The bounds of failover (docs/design/cache-register.md).

    Attributes:
        timeout_s: a server that has not answered a request within this is down (connect and
            each read); no request waits on a server longer.
        retry_s: a down server is left alone this long, then probed by the next request.
    """

    timeout_s: float = 1.0
    retry_s: float = 2.0


class ServerUse(NamedTuple):
    """How an exchange may use one server now.

    ``suffix``: appended to every key sent (None: nothing is sent). ``creates``: an ADD may be
    sent (only once ``UP`` has stood a lease: a fill then never races a returning process's
    SET, which goes as REPLACE). ``replaces``: a SET goes as REPLACE (``RETURNING``: no item is
    created under an epoch before every process may read it).
    ``readable``: the read paths may use it (``available``). ``epoch``: the record's epoch the
    use was decided under. ``skip_is_missed``: a write not sent to it is missed, and its epoch
    must be revoked (False only where the record already says ``DOWN``)."""

    suffix: bytes | None
    creates: bool
    replaces: bool
    readable: bool
    epoch: ServerEpoch
    skip_is_missed: bool


class _Down(NamedTuple):
    """A server this process found failing: left alone ``until``, marked under the record's
    epoch ``under``, after ``failed`` probes in a row failed (0: the first failure)."""

    until: float
    under: ServerEpoch
    failed: int


class ServerTrust:
    """Per server: down until when (this process's view), and the shared record's epochs."""

    def __init__(
        self,
        servers: Sequence[str],
        settings: TrustSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
        ring: RingView | None = None,
        new_epoch: Callable[[], str] = lambda: secrets.token_hex(4),
    ) -> None:
        """``new_epoch``: a value no epoch of any server has had (random, 8 hex digits)."""
        self.ring = ring or RingView(RingRecord.of(servers), clock=clock)
        self.settings = settings or TrustSettings()
        self.clock = clock
        self.new_epoch = new_epoch
        self._down: dict[str, _Down] = {}  # each mark replaced whole (module docstring)
        self._lock = threading.Lock()

    @classmethod
    def of(cls, servers: Sequence[tuple[str, int]], timeout: float | None) -> ServerTrust:
        """A process's trust in ``servers`` with the default bounds (``timeout``, if given, as
        ``timeout_s``) and a record of its own: what a client makes when given none to share."""
        bounds = TrustSettings() if timeout is None else TrustSettings(timeout_s=timeout)
        return cls([f"{host}:{port}" for host, port in servers], bounds)

    @property
    def servers(self) -> list[str]:
        """The servers this process may use in its ring state: while the ring moves, those of
        both versions."""
        return list(self.ring.record.used)

    # -- down and up (this process) --------------------------------------------------------

    def mark_down(self, server: str) -> None:
        """Down for ``retry_s``, doubled for each probe in a row it failed (at most 8 times
        ``retry_s``): a hung server costs one request a timeout per interval, and the
        intervals grow while it stays hung."""
        with self._lock:
            before = self._down.get(server)
            failed = 0 if before is None else before.failed + 1
            backoff = self.settings.retry_s * min(8, 2**failed)
            under = self.ring.record.epoch(server)
            self._down[server] = _Down(self.clock() + backoff, under, failed)

    def mark_up(self, server: str) -> None:
        with self._lock:
            self._down.pop(server, None)

    def is_down(self, server: str) -> bool:
        """Down and not yet due for a probe. A server another process brought back since this
        one marked it down (the record gives it another epoch or state) is due at once:
        waiting out the back-off would only skip writes to it, each one revoking it again."""
        down = self._down.get(server)
        if down is None or self.clock() >= down.until:
            return False
        return down.under == self.ring.record.epoch(server)

    def was_down(self, server: str) -> bool:
        """Marked down at some point and not seen answering since (a probe is due)."""
        return server in self._down

    # -- the record's epochs ---------------------------------------------------------------

    def use(self, server: str, record: RingRecord | None) -> ServerUse:
        """How ``server`` may be used under ``record`` (None: no lease on the record, so
        nothing is sent, and a skipped write cannot be judged: its epoch is given as ``down``,
        under which no write is ever sent, and revoking it fails)."""
        epoch = record.epoch(server) if record is not None else ServerEpoch("", EpochState.DOWN)
        if record is None:
            return ServerUse(None, False, False, False, epoch, True)
        if epoch.state is EpochState.DOWN:
            return ServerUse(None, False, False, False, epoch, False)
        if self.is_down(server):  # due for a probe: the next request is one
            return ServerUse(None, False, False, False, epoch, True)
        up = epoch.state is EpochState.UP
        creates = up and self._settled(server, epoch)
        return ServerUse(epoch.suffix, creates, not up, up, epoch, True)

    def _settled(self, server: str, epoch: ServerEpoch) -> bool:
        """Whether ``epoch`` has been up for a lease (or was never revoked): only then has
        every lease on it returning run out, and an item created here cannot race a write that
        a returning process sent as REPLACE (which creates nothing)."""
        return (
            not epoch.value
            or self.ring.first_seen(server, epoch) + self.ring.stale_s <= self.clock()
        )

    def suffix(self, server: str) -> bytes | None:
        """``server``'s key suffix for a read under the live lease (None: not readable now)."""
        use = self.use(server, self.ring.leased())
        return use.suffix if use.readable else None

    def held_until(self, server: str, epoch: ServerEpoch) -> float:
        """Until when a writer that wrote to ``server`` (or skipped it, or saw it miss a write)
        while the record gives it ``epoch`` holds its batch: a lease period after this process
        first saw that epoch's value, since a lease on the epoch before it, which other
        processes may still read, lasts at most that. An ``UP`` epoch has stood that long
        already (it went up a lease after it was first seen returning)."""
        if epoch.state is EpochState.UP:
            return float("-inf")
        return self.ring.value_first_seen(server, epoch.value) + self.ring.stale_s
