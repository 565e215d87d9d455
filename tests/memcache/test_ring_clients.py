"""Both clients under a ring that moves (memcache/ring.py), on real memcached servers: a moving
key is read as missing and written by nobody, a moved key is found under its new name by both
clients, and a process whose ring lease ran out uses no server."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.held_ring import HeldRing
from timeline_fanout.memcache.async_cluster import AsyncMemcache, Replies
from timeline_fanout.memcache.cluster import CacheUnavailable, MemcacheCluster, Outcome
from timeline_fanout.memcache.pools import ServerPipe
from timeline_fanout.memcache.ring import MOVED, Placement, RingRecord, RingView
from timeline_fanout.memcache.trust import ServerTrust, TrustSettings
from timeline_fanout.memcache.wire import AppendGroup
from timeline_fanout_devstack.memcached_processes import own_server

# Ring leases are moved by the tests' clocks; the timeouts only bound a failed exchange.
BOUNDS = TrustSettings(timeout_s=0.5, retry_s=0.5)
Server = tuple[subprocess.Popen[bytes], tuple[str, int]]
KEYS = [b"t|tl|u%d" % i for i in range(200)]


@pytest.fixture
def four() -> Iterator[list[str]]:
    with own_server() as a, own_server() as b, own_server() as c, own_server() as d:
        yield sorted(f"{h}:{p}" for _, (h, p) in (a, b, c, d))


class PausingPipe(ServerPipe):
    """A blocking client's connection that runs its process's ``pause`` before a request."""

    def __init__(self, host: str, port: int, timeout: float, process: Clients) -> None:
        super().__init__(host, port, timeout)
        self._process = process

    def send(self, payload: bytes) -> None:
        if (pause := self._process.pause) is not None:
            self._process.pause = None
            pause()
        super().send(payload)


class Clients:
    """One process: a blocking and an event-loop client sharing a trust and a ring view."""

    def __init__(self, servers: list[str], source: HeldRing) -> None:
        self.now = 0.0
        # Run once before the blocking client's next request goes out (``PausedMidRead``).
        self.pause: Callable[[], None] | None = None
        self.view = RingView(RingRecord.of(servers), source, 10.0, clock=lambda: self.now)
        trust = ServerTrust(servers, BOUNDS, ring=self.view)
        pairs = [(h, int(p)) for h, p in (s.rsplit(":", 1) for s in servers)]
        self.blocking = MemcacheCluster(pairs, trust=trust, connect=self._connect)
        self.pairs, self.trust = pairs, trust

    def _connect(self, node: str) -> ServerPipe:
        host, port = node.rsplit(":", 1)
        return PausingPipe(host, int(port), BOUNDS.timeout_s, self)

    def switch(self) -> None:
        self.now += 10.0
        self.blocking.available([b"probe"])  # reads the record again

    def read_on_loop(self, keys: list[bytes]) -> dict[bytes, bytes]:
        """One read by an event-loop client of this process (its connections belong to the
        loop: one client per loop run)."""

        async def main() -> dict[bytes, bytes]:
            client = AsyncMemcache(self.pairs, trust=self.trust)
            try:
                return {k: v.value for k, v in (await client.gets_many(keys)).items()}
            finally:
                client.close()

        return asyncio.run(main())


def split(record: RingRecord) -> tuple[list[bytes], list[bytes]]:
    """``KEYS`` that move under the moving ``record``, and those that stay."""
    owners = Placement(record).owners(KEYS)
    return (
        [k for k, o in zip(KEYS, owners, strict=True) if o == MOVED],
        [k for k, o in zip(KEYS, owners, strict=True) if o != MOVED],
    )


def test_a_moving_key_is_missing_for_reads_and_refused_for_writes(four: list[str]) -> None:
    source = HeldRing(RingRecord.of(four[:3]))
    process = Clients(four[:3], source)
    process.blocking.settle()
    assert set(process.blocking.set_many(dict.fromkeys(KEYS, b"v")).values()) == {Outcome.STORED}
    record = source.record
    assert record is not None
    moving = record.moved_to(four)
    assert source.swap_ring(record, moving)
    process.switch()
    moved, stayed = split(moving)
    assert moved and stayed
    assert set(process.blocking.get_many(KEYS)) == set(stayed)
    assert process.blocking.available(KEYS) == [k in stayed for k in KEYS]
    with pytest.raises(CacheUnavailable, match="moving"):
        process.blocking.append_many({moved[0]: b"w"})
    with pytest.raises(CacheUnavailable, match="moving"):
        process.blocking.append_to_each([AppendGroup(b"w", [stayed[0], moved[0]])])
    assert process.blocking.get_many([stayed[0]]) == {stayed[0]: b"vw"}  # the rest was sent
    with pytest.raises(CacheUnavailable, match="moving"):
        process.read_on_loop(moved[:1])
    assert process.read_on_loop(stayed) == dict.fromkeys(stayed, b"v") | {stayed[0]: b"vw"}


def test_a_readers_fills_of_a_moving_key_are_refused_and_the_rest_are_made(
    four: list[str],
) -> None:
    source = HeldRing(RingRecord.of(four[:3]))
    process = Clients(four[:3], source)
    process.blocking.settle()
    record = source.record
    assert record is not None
    assert source.swap_ring(record, record.moved_to(four))
    process.switch()
    moved, stayed = split(source.record or record)
    fills = process.blocking.fills()
    both = [moved[0], stayed[0]]
    assert fills.add_many(dict.fromkeys(both, b"~")) == {
        moved[0]: Outcome.NOT_STORED,
        stayed[0]: Outcome.STORED,
    }
    items = process.blocking.gets_many(both)
    assert set(items) == {stayed[0]}
    writes = {moved[0]: (b"v", b"1/1"), stayed[0]: (b"v", items[stayed[0]].cas)}
    assert fills.cas_many(writes) == {moved[0]: Outcome.NOT_FOUND, stayed[0]: Outcome.STORED}
    assert fills.append_many(dict.fromkeys(both, b"+")) == {
        moved[0]: Outcome.NOT_STORED,
        stayed[0]: Outcome.STORED,
    }
    fills.delete_many(both)
    assert process.blocking.get_many(both) == {}
    with pytest.raises(CacheUnavailable, match="moving"):  # the writer's client still raises
        process.blocking.add_many({moved[0]: b"~"})


def test_a_moved_key_is_one_item_for_both_clients_under_its_new_name(four: list[str]) -> None:
    source = HeldRing(RingRecord.of(four[:3]))
    old = Clients(four[:3], source)
    old.blocking.settle()
    old.blocking.set_many(dict.fromkeys(KEYS, b"old"))
    record = source.record
    assert record is not None
    grown = record.moved_to(four).settled()
    assert source.swap_ring(record, grown)
    process = Clients(four[:3], source)
    process.switch()
    process.blocking.settle()
    moved, _ = split(record.moved_to(four))
    assert process.blocking.get_many(moved) == {}  # the new server's copies start empty
    process.blocking.set_many(dict.fromkeys(moved, b"new"))
    assert process.read_on_loop(moved) == dict.fromkeys(moved, b"new")
    back = grown.moved_to(four[:3]).settled()
    assert source.swap_ring(grown, back)
    process.switch()
    process.blocking.settle()
    # Back on the servers they left: the copies there missed "new", and are not read.
    assert process.blocking.get_many(moved) == {}
    assert process.read_on_loop(moved) == {}


def test_a_process_that_cannot_read_the_record_uses_no_server(four: list[str]) -> None:
    source = HeldRing(RingRecord.of(four[:3]))
    process = Clients(four[:3], source)
    process.blocking.settle()
    process.blocking.set_many(dict.fromkeys(KEYS, b"v"))
    source.broken = True
    process.now += 10.0
    assert process.blocking.get_many(KEYS) == {}
    assert process.blocking.available(KEYS) == [False] * len(KEYS)
    with pytest.raises(CacheUnavailable):
        process.blocking.set_many({KEYS[0]: b"w"})
    with pytest.raises(CacheUnavailable, match="ring"):
        process.read_on_loop(KEYS[:3])


def test_replies_kept_from_another_ring_are_not_taken_for_this_ones(four: list[str]) -> None:
    """The page memo hands back a read's replies to compare with; under another ring the same
    keys are split otherwise, so they must be read and parsed afresh."""
    source = HeldRing(RingRecord.of(four[:3]))
    process = Clients(four[:3], source)
    process.blocking.settle()
    process.blocking.set_many(dict.fromkeys(KEYS, b"v"))

    async def read(earlier: Replies | None) -> Replies:
        client = AsyncMemcache(process.pairs, trust=process.trust)
        try:
            return await client.gets_replies(tuple(KEYS), earlier)
        finally:
            client.close()

    first = asyncio.run(read(None)).unparsed()
    assert asyncio.run(read(first)).found is None  # the same ring: taken whole
    record = source.record
    assert record is not None
    grown = record.moved_to(four).settled()
    assert source.swap_ring(record, grown)
    process.switch()
    process.blocking.settle()
    process.blocking.set_many(dict.fromkeys(KEYS, b"v"))  # the moved ones written again
    again = asyncio.run(read(first))
    assert again.found is not None
    assert {k: v.value for k, v in again.found.items()} == dict.fromkeys(KEYS, b"v")


def test_an_event_loop_read_first_after_a_reversal_asks_the_new_names(four: list[str]) -> None:
    """The event loop's first read under a record places the keys itself: the names come
    from that placement, never from keys a blocking read happened to place before."""
    source = HeldRing(RingRecord.of(four[:3]))
    first = Clients(four[:3], source)
    first.blocking.settle()
    first.blocking.set_many(dict.fromkeys(KEYS, b"left behind"))
    record = source.record
    assert record is not None
    grown = record.moved_to(four).settled()
    back = grown.moved_to(four[:3]).settled()
    assert source.swap_ring(record, grown) and source.swap_ring(grown, back)
    moved, _ = split(record.moved_to(four))
    fresh = Clients(four[:3], source)
    fresh.switch()
    fresh.blocking.settle()
    assert fresh.read_on_loop(moved) == {}  # never the copies of version 1


def paused_mid_read(process: Clients, meanwhile: Callable[[], None]) -> None:
    """``process``'s blocking client paused after placing its next read and before sending
    it, for as long as ``meanwhile`` takes (its ring lease runs out meanwhile)."""

    def pause() -> None:
        meanwhile()
        process.now += 100.0

    process.pause = pause


def test_a_read_paused_past_a_whole_change_does_not_return_the_copy_left_behind(
    four: list[str],
) -> None:
    source = HeldRing(RingRecord.of(four[:3]))
    writer, reader = Clients(four[:3], source), Clients(four[:3], source)
    for process in (writer, reader):
        process.switch()
        process.blocking.settle()
    writer.blocking.set_many(dict.fromkeys(KEYS, b"old"))
    record = source.record
    assert record is not None
    moving = record.moved_to(four)
    moved, stayed = split(moving)

    def change() -> None:
        assert source.swap_ring(record, moving)
        writer.switch()
        writer.blocking.settle()
        assert source.swap_ring(moving, moving.settled())
        writer.switch()
        writer.blocking.settle()
        writer.blocking.set_many(dict.fromkeys(moved, b"new"))

    paused_mid_read(reader, change)
    got = reader.blocking.get_many(KEYS)
    assert b"old" not in {got[k] for k in moved if k in got}
    assert {got[k] for k in stayed} == {b"old"}  # on the same server, under the same name


def test_a_callers_error_mid_exchange_leaves_no_reply_for_the_next_exchange(
    four: list[str],
) -> None:
    """The first server's pipeline is sent, then building the second's raises (a value that is
    not bytes): the first's reply, never read, must not answer the next exchange."""
    process = Clients(four[:3], HeldRing(RingRecord.of(four[:3])))
    process.blocking.settle()
    first, second = process.view.record.servers[:2]
    on = {
        node: next(k for k in KEYS if process.blocking.server_for(k) == node) for node in four[:3]
    }
    process.blocking.set_many({on[first]: b"old"})
    stale = process.blocking.gets_many([on[first]])[on[first]].cas
    process.blocking.set_many({on[first]: b"changed"})
    bad: Any = "not bytes"
    with pytest.raises(TypeError):
        process.blocking.set_many({on[first]: b"a", on[second]: bad})
    assert process.blocking.cas_many({on[first]: (b"lost", stale)})[on[first]] in (
        Outcome.EXISTS,
        Outcome.NOT_FOUND,
    )
