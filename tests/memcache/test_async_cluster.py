"""``AsyncMemcache`` on the real memcached servers and on servers that misbehave.

The event loop's meta gets must return exactly the values the blocking client returns (they
ask for nothing else: the timeline read replays the blocking read's code over them, and never
writes back), keep every caller's replies its own however many share a connection, and turn a
server that hangs, closes or talks nonsense into ``CacheUnavailable`` for everyone waiting,
never into a hang or someone else's value.
Both event loops are exercised: uvloop (what ``fanout serve`` runs) and asyncio's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import Any

import pytest
import uvloop

from tests.conftest import Refused
from tests.held_ring import HeldRing, process_trust
from timeline_fanout.cli.settings import Settings
from timeline_fanout.memcache.async_cluster import AsyncMemcache, Replies
from timeline_fanout.memcache.cluster import CacheUnavailable, Item, MemcacheCluster, Outcome
from timeline_fanout.memcache.ring import EpochState, RingRecord, ServerEpoch
from timeline_fanout.memcache.trust import ServerTrust, TrustSettings
from timeline_fanout.memcache.wire import NOT_READ
from timeline_fanout_devstack.memcached_processes import own_server, stop
from timeline_fanout_devstack.stack import StackState

ITEM_LIMIT = 1024 * 1024  # memcached's default -I, which the test stack runs with
TIMEOUT = 0.5  # the client's timeout where a server is made to hang
Servers = list[tuple[str, int]]
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture
def servers(local_stack: StackState, cache: MemcacheCluster) -> Servers:
    """The fixture stack's three memcached servers, flushed (through ``cache``)."""
    return Settings(memcached=local_stack.memcached).memcached_servers


def run_on_both_loops(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(main())
    uvloop.run(main())


async def gets(servers: Servers, keys: list[bytes], timeout: float = 2.0) -> dict[bytes, Item]:
    """One call on a fresh client (closed afterwards)."""
    client = AsyncMemcache(servers, timeout)
    try:
        return await client.gets_many(keys)
    finally:
        client.close()


def test_items_are_the_blocking_clients_on_both_servers(
    servers: Servers, cache: MemcacheCluster
) -> None:
    big = bytes(range(256)) * ((ITEM_LIMIT - 2048) // 256)  # many socket reads to arrive
    values = {
        b"plain": b"value",
        b"empty": b"",
        b"crlf": b"one\r\ntwo\r\nEN\r\n",
        b"protocol": b"VA 3 c1 t-1\r\nabc\r\nEN\r\n",  # a reply's form inside a value
        b"binary": bytes(range(256)) * 3,
        b"big": big,
        **{b"k%02d" % i: b"v%d" % i * i for i in range(30)},
    }
    assert cache.set_many(values) == dict.fromkeys(values, Outcome.STORED)
    assert cache.set_many({b"expiring": b"soon"}, expire=300) == {b"expiring": Outcome.STORED}
    keys = [*values, b"expiring"]
    assert {cache.server_for(k) for k in keys} == set(cache.servers)  # both servers asked
    asked = [b"miss1", *keys, b"miss2", b"crlf", b"big", b"plain", b"miss1"]  # misses, repeats

    blocking = cache.gets_many(asked)
    assert {k: item.value for k, item in blocking.items()} == {**values, b"expiring": b"soon"}
    assert blocking[b"plain"].ttl == -1 and 0 < blocking[b"expiring"].ttl <= 300

    async def main() -> None:
        got = await gets(servers, asked)  # values alone: no CAS id, no time to live
        assert got == unread_ttl(blocking)
        assert await gets(servers, [b"miss1", b"miss2"]) == {}
        assert await gets(servers, []) == {}

    run_on_both_loops(main)


def test_the_event_loop_reads_the_blocking_clients_items_under_names_and_epochs(
    servers: Servers, cache: MemcacheCluster
) -> None:
    """Under a record with a history (keys renamed on the server that joined) and an epoch (a
    suffix on one server), the event loop asks for exactly the items the blocking client
    wrote: the same plan of each batch, never the copies left at the plain names."""
    names = sorted(f"{host}:{port}" for host, port in servers)
    keys = [b"named%d" % i for i in range(300)]
    assert cache.set_many(dict.fromkeys(keys, b"left behind")) == dict.fromkeys(
        keys, Outcome.STORED
    )
    record = RingRecord((tuple(names[:2]), tuple(names))).with_epoch(
        names[1], ServerEpoch("0abc0abc", EpochState.UP)
    )
    trust = process_trust(names, HeldRing(record), TrustSettings(timeout_s=2.0), 60.0)
    placement = trust.ring.renewed()
    assert placement is not None and placement.names(keys)  # some keys are renamed
    blocking = MemcacheCluster(servers, trust=trust)
    written = {k: b"written %d" % i for i, k in enumerate(keys)}
    try:
        assert blocking.set_many(written) == dict.fromkeys(keys, Outcome.STORED)
    finally:
        blocking.close()

    async def main() -> None:
        client = AsyncMemcache(servers, trust=trust)
        try:
            found = await client.gets_many(keys)
        finally:
            client.close()
        assert {k: item.value for k, item in found.items()} == written

    run_on_both_loops(main)


def test_hundreds_of_concurrent_calls_each_get_their_own_items(
    servers: Servers, cache: MemcacheCluster
) -> None:
    count = 300
    values = {b"c%03d" % i: b"%03d" % i * (1 + 40 * (i % 7)) for i in range(count)}
    big = {b"big%d" % i: b"%d" % i * (200_000 + i) for i in range(3)}
    cache.set_many({**values, **big})
    keys = list(values)

    def asked(i: int) -> list[bytes]:  # two keys, often one per server, and a miss
        return [keys[i], keys[(i * 7 + 1) % count], b"nothing%d" % i]

    def want(i: int) -> dict[bytes, Item]:
        return unread_ttl({k: cache.gets_many([k])[k] for k in asked(i)[:2]})

    expected = [want(i) for i in range(count)]

    async def main() -> None:
        client = AsyncMemcache(servers)
        try:
            await client.gets_many(keys)  # both servers connected: every call below writes at once
            calls = [asyncio.create_task(client.gets_many(asked(i))) for i in range(count)]
            middle = [asyncio.create_task(client.gets_many(list(big))) for _ in range(2)]
            after = [asyncio.create_task(client.gets_many(asked(i))) for i in range(50)]
            await asyncio.sleep(0)  # every call has sent its request and awaits its replies
            assert not any(t.done() for t in [*calls, *middle, *after])
            middle[0].cancel()  # its replies (600 kB) are still on their way
            results = await asyncio.gather(*calls, middle[1], *after, return_exceptions=True)
            assert results == [*expected, unread_ttl(cache.gets_many(list(big))), *expected[:50]]
            assert middle[0].cancelled()
            assert await client.gets_many(asked(5)) == expected[5]
        finally:
            client.close()

    asyncio.run(main())


def unread_ttl(items: dict[bytes, Item]) -> dict[bytes, Item]:
    """The blocking client's items as the event loop's client reads them (values alone)."""
    return {key: Item(item.value, b"", NOT_READ) for key, item in items.items()}


def test_replies_equal_to_the_expected_ones_are_not_parsed_and_any_change_is(
    servers: Servers, cache: MemcacheCluster
) -> None:
    """What the page memo rests on (graph/timelines/page_memo.py): ``found`` is None exactly when
    every server's replies are the expected bytes; a value rewritten with the same bytes (a new CAS
    id) is the same, any other change is parsed, and a value of many socket reads compares
    whole."""
    big = bytes(range(256)) * ((ITEM_LIMIT - 2048) // 256)
    values = {b"small": b"+a ", b"empty": b"", b"big": big}
    # Small values until every server holds some (the servers' ports, so the placement, vary).
    while len(values) < 12 or {cache.server_for(k) for k in values} != set(cache.servers):
        values[b"r%d" % len(values)] = b"%d" % len(values)
    assert cache.set_many(values) == dict.fromkeys(values, Outcome.STORED)
    keys = (*values, b"missing")

    async def main() -> None:
        client = AsyncMemcache(servers)
        try:
            first = await client.gets_replies(keys)
            assert first.found is not None and len(first.raw) == len(cache.servers)
            assert {k: v.value for k, v in first.found.items()} == values
            same = first.unparsed()
            assert await client.gets_replies(keys, first) == same
            cache.set_many({b"small": b"+a "})  # the same bytes, a new CAS id
            assert await client.gets_replies(keys, first) == same
            for change in ({b"small": b"+a +b "}, {b"missing": b"now"}, {b"big": big[:-1] + b"!"}):
                cache.set_many(change)
                now = await client.gets_replies(keys, first)
                assert now.found is not None and now.raw != first.raw
                assert {k: now.found[k].value for k in change} == change
                assert {k: v.value for k, v in now.found.items() if k not in change} == {
                    k: v for k, v in values.items() if k not in change
                }
                cache.set_many({k: values.get(k, b"") for k in change})
                cache.delete_many([b"missing"])
            assert await client.gets_replies(list(keys), first) == same
        finally:
            client.close()

    run_on_both_loops(main)


def test_earlier_replies_of_other_keys_are_never_compared_with(
    servers: Servers, cache: MemcacheCluster
) -> None:
    """Taking a part's earlier bytes whole relies on them holding as many replies as the part
    has keys: earlier bytes holding the replies of `x` and `z`, passed for a call of `x` alone,
    would take `z`'s reply too, and the next call would get `x`'s value under `z`. Earlier
    replies count only for the same keys."""
    on_first = [
        k for k in (b"adv7-%d" % i for i in range(40)) if cache.server_for(k) == cache.servers[0]
    ]
    x, z = on_first[:2]  # one server's, so its stream holds both replies in a row
    host, _, port = cache.servers[0].rpartition(":")
    one = [(host, int(port))]
    stored = MemcacheCluster(one).set_many({x: b"1", z: b"3"})
    assert stored == {x: Outcome.STORED, z: Outcome.STORED}

    async def main() -> None:
        client = AsyncMemcache(one)
        try:
            both = await client.gets_replies((x, z))
            misused = [
                client.gets_replies((x,), both),
                client.gets_many([z]),
                client.gets_many([x]),
            ]
            got = await asyncio.wait_for(asyncio.gather(*misused), 5)
            assert got[0].found is not None and got[0].found[x].value == b"1"
            assert {k: v.value for k, v in got[1].items()} == {z: b"3"}
            assert {k: v.value for k, v in got[2].items()} == {x: b"1"}
        finally:
            client.close()

    run_on_both_loops(main)


def test_a_part_half_parsed_is_never_taken_whole_against_the_expected_replies() -> None:
    """A part whose first replies were parsed must not be matched against the expected bytes
    from there on. Here the first miss arrives alone and the other nineteen of four calls
    together: four misses and the next call's first are the same bytes as five misses, so a
    match in the middle would take the next call's reply and leave the last call a reply short
    (a timeout here)."""
    misses = b"EN\r\n" * 5
    calls = 4

    async def first_alone(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        asked = b""
        while asked.count(b"\r\n") < 5 * calls:
            asked += await reader.read(1 << 16)
        assert all(line.endswith(b" v") for line in asked.split(b"\r\n")[:-1]), asked
        writer.write(b"EN\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)  # read on its own
        writer.write(b"EN\r\n" * (5 * calls - 1))
        await silent(reader, writer)

    async def main() -> None:
        async with fake_server(first_alone) as address:
            client = AsyncMemcache([address], TIMEOUT)
            try:
                keys = tuple(b"k%d" % i for i in range(5))
                ring = RingRecord.of([f"{address[0]}:{address[1]}"])
                earlier = Replies(keys, (misses,), None, ring)
                got = await asyncio.wait_for(
                    asyncio.gather(*(client.gets_replies(keys, earlier) for _ in range(calls))),
                    10,
                )
                assert got == [earlier] * calls
            finally:
                client.close()

    run_on_both_loops(main)


@contextlib.asynccontextmanager
async def fake_server(handle: Handler) -> AsyncIterator[tuple[str, int]]:
    """A TCP listener on loopback whose connections ``handle`` serves (on the same loop); on
    leaving, its connections are dropped and their handlers finish."""
    handlers: list[asyncio.Task[None]] = []
    writers: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.append(asyncio.current_task())  # type: ignore[arg-type]
        writers.append(writer)
        with contextlib.suppress(ConnectionError):
            await handle(reader, writer)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[:2]
    finally:
        server.close()
        for writer in writers:
            writer.transport.abort()
        await asyncio.gather(*handlers)


async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Accepts and reads, never replies (a server stopped, a network that dropped)."""
    while await reader.read(1 << 16):
        pass
    writer.close()


async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Reads the first request, then closes the connection."""
    await reader.read(1 << 16)
    writer.close()


def replying(reply: bytes) -> Handler:
    """Answers the first request with ``reply``, then reads on, silent."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1 << 16)
        writer.write(reply)
        await silent(reader, writer)

    return handle


async def all_fail(address: tuple[str, int], timeout: float, calls: int = 5) -> list[BaseException]:
    """``calls`` concurrent calls on one connection to ``address`` (client ``timeout``): what
    each raised; a hang fails the test after 10 s."""
    client = AsyncMemcache([address], timeout)
    try:
        results = await asyncio.wait_for(
            asyncio.gather(
                *(client.gets_many([b"k%d" % i, b"x"]) for i in range(calls)),
                return_exceptions=True,
            ),
            10,
        )
    finally:
        client.close()
    assert all(isinstance(r, BaseException) for r in results), results
    return [r for r in results if isinstance(r, BaseException)]


def test_a_server_that_never_answers_fails_every_waiting_call_after_the_timeout() -> None:
    async def main() -> float:
        async with fake_server(silent) as address:
            started = time.monotonic()
            failed = await all_fail(address, TIMEOUT)
            elapsed = time.monotonic() - started
        assert all(isinstance(e, CacheUnavailable) for e in failed), failed
        assert "no reply within" in str(failed[0])
        return elapsed

    elapsed = uvloop.run(main())
    assert TIMEOUT * 0.9 <= elapsed < TIMEOUT + 5  # about the timeout: not at once, no hang


@pytest.mark.parametrize(
    "handle",
    [
        closing,
        replying(b"SERVER_ERROR out of memory\r\n"),
        replying(b"VA x\r\n"),
        replying(b"VA 3 c1 t1\r\nabc\r\n"),
        replying(b"\r\n"),
    ],
    ids=["closes", "error", "bad-length", "unasked-flags", "blank"],
)
def test_a_server_that_closes_or_talks_nonsense_fails_every_waiting_call(
    handle: Handler,
) -> None:
    async def main() -> None:
        async with fake_server(handle) as address:
            failed = await all_fail(address, timeout=60)  # told at once, not by the watchdog
        assert all(isinstance(e, CacheUnavailable) for e in failed), failed

    run_on_both_loops(main)


def test_a_reply_nobody_asked_for_closes_the_connection_and_never_answers_the_next_call() -> None:
    """The first connection's server sends one reply too many (a hit): were it kept, it would
    be the answer to the next call's first key."""
    connections = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        extra = b"VA 5 c9 t-1\r\nstale\r\n" if len(connections) == 1 else b""
        while request := await reader.read(1 << 16):
            writer.write(b"EN\r\n" * request.count(b"mg ") + extra)  # one write: one segment
            extra = b""
        writer.close()

    async def main() -> None:
        connections.clear()
        async with fake_server(handle) as address:
            client = AsyncMemcache([address], 60)
            try:
                assert await client.gets_many([b"a", b"b"]) == {}
                await asyncio.sleep(0.05)  # the extra reply has arrived: nobody waits for it
                assert await asyncio.wait_for(client.gets_many([b"c"]), 10) == {}
            finally:
                client.close()
        assert len(connections) == 2

    run_on_both_loops(main)


def test_a_refused_connection_is_unavailable(refused: Refused) -> None:
    async def main() -> None:
        with pytest.raises(CacheUnavailable):
            await gets([refused.pair], [b"k"], TIMEOUT)

    asyncio.run(main())


@pytest.fixture
def own_memcached() -> Iterator[tuple[subprocess.Popen[bytes], tuple[str, int]]]:
    """A memcached of this test's own, to stop and continue (never the fixture stack's)."""
    with own_server() as server:
        yield server


def test_a_stopped_server_fails_calls_and_a_call_after_the_retry_interval_reconnects(
    own_memcached: tuple[subprocess.Popen[bytes], tuple[str, int]],
) -> None:
    proc, address = own_memcached
    MemcacheCluster([address]).set_many({b"k": b"v"})
    retry_s = 0.3
    name = f"{address[0]}:{address[1]}"
    trust = ServerTrust([name], TrustSettings(timeout_s=TIMEOUT, retry_s=retry_s))

    async def main() -> None:
        client = AsyncMemcache([address], trust=trust)
        try:
            assert (await client.gets_many([b"k"]))[b"k"].value == b"v"  # connected
            stop(proc)
            with pytest.raises(CacheUnavailable):  # the open connection times out
                await asyncio.wait_for(client.gets_many([b"k"]), 10)
            assert trust.is_down(name)  # down: not asked again until the retry interval
            with pytest.raises(CacheUnavailable):
                await asyncio.wait_for(client.gets_many([b"k"]), 0.1)
            proc.send_signal(signal.SIGCONT)
            deadline = time.monotonic() + 10
            while trust.is_down(name):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            assert (await client.gets_many([b"k"]))[b"k"].value == b"v"
        finally:
            client.close()

    uvloop.run(main())


def test_a_server_down_in_the_register_is_unavailable_at_once_never_a_call_left_waiting(
    servers: Servers, cache: MemcacheCluster
) -> None:
    """Nothing may be sent to it (its items missed writes), so there is nothing to send: the
    call must fail, not wait for replies that no server was asked for."""
    names = sorted(f"{host}:{port}" for host, port in servers)
    lone = names[0]
    keys = [k for k in (b"g%d" % i for i in range(200)) if cache.server_for(k) == lone][:5]
    down = RingRecord.of(names).with_epoch(lone, ServerEpoch("0badc0de", EpochState.DOWN))
    trust = process_trust(names, HeldRing(down), TrustSettings(timeout_s=TIMEOUT), 60.0)
    assert trust.ring.renewed() is not None  # the record read, as a request thread does

    async def main() -> None:
        client = AsyncMemcache(servers, trust=trust)
        try:
            with pytest.raises(CacheUnavailable):
                await asyncio.wait_for(client.gets_many(keys), 5)
        finally:
            client.close()

    run_on_both_loops(main)


def test_a_call_cancelled_while_connecting_does_not_strand_the_calls_that_joined_it(
    servers: Servers, cache: MemcacheCluster
) -> None:
    MemcacheCluster(servers[:1]).set_many({b"k": b"v"})

    async def main() -> None:
        client = AsyncMemcache(servers[:1])
        try:
            first = asyncio.create_task(client.gets_many([b"k"]))
            second = asyncio.create_task(client.gets_many([b"k"]))
            await asyncio.sleep(0)  # both wait for the one connection being made
            first.cancel()  # a request whose client went away
            found = await asyncio.wait_for(second, 2)
            assert found[b"k"].value == b"v"
        finally:
            client.close()

    asyncio.run(main())


def test_remembered_plans_hold_a_bounded_number_of_keys(
    servers: Servers, cache: MemcacheCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan holds its keys and their commands, so plans are bounded by the keys they hold,
    not by their count (bounded by count, 32k plans of 107 keys held 369-715 MiB). One-off
    multi-GETs (``gets_many``: the round trips after a batch) and plans of many keys are not
    kept."""
    # at most 10 keys a plan
    monkeypatch.setattr("timeline_fanout.memcache.async_cluster.REMEMBERED_PLAN_KEYS", 640)
    assert cache.set_many({b"k%d" % i: b"v%d" % i for i in range(0, 2000, 7)})

    async def main() -> None:
        client = AsyncMemcache(servers)
        try:
            for call in range(300):
                keys = tuple(b"k%d" % (call * 7 + i) for i in range(7))
                got = (await client.gets_replies(keys)).found
                assert got is not None
                assert {k: v.value for k, v in got.items()} == {
                    k: b"v" + k[1:] for k in keys if int(k[1:]) % 7 == 0 and int(k[1:]) < 2000
                }
                held = sum(len(plan_keys) for plan_keys in client._plans)
                assert keys in client._plans and held <= 640
            many = tuple(b"many%d" % i for i in range(11))
            one_off = (b"k0", b"k7", b"once")
            assert (await client.gets_replies(many)).found == {}
            assert set(await client.gets_many(one_off)) == {b"k0", b"k7"}
            assert many not in client._plans and one_off not in client._plans
        finally:
            client.close()

    run_on_both_loops(main)


@pytest.mark.parametrize("state", [EpochState.DOWN, EpochState.RETURNING])
def test_the_event_loop_reads_no_item_of_a_server_not_up_in_the_register(
    servers: Servers, cache: MemcacheCluster, state: EpochState
) -> None:
    """A writer that could not reach a server gave it a new epoch in the register: the items
    under the old one missed the write, and while the server is not up again nothing of it is
    read here (the blocking read answers from the edge store)."""
    names = sorted(f"{host}:{port}" for host, port in servers)
    keys = [b"d%d" % i for i in range(200)]
    target = cache.server_for(keys[0])
    mine = [k for k in keys if cache.server_for(k) == target][:5]
    cache.set_many(dict.fromkeys(mine, b"old"))
    revoked = RingRecord.of(names).with_epoch(target, ServerEpoch("0ne0ne01", state))
    trust = process_trust(names, HeldRing(revoked), TrustSettings(timeout_s=TIMEOUT), 60.0)
    assert trust.ring.renewed() is not None

    async def main() -> None:
        client = AsyncMemcache(servers, trust=trust)
        try:
            with pytest.raises(CacheUnavailable):  # left to the blocking read
                await client.gets_many(mine)
        finally:
            client.close()

    run_on_both_loops(main)


class StalledRing(HeldRing):
    """A shared place whose reads stall (a store failing over) once ``stall`` is set, until
    ``release`` is: the reading thread holds the ring's lock all that time."""

    def __init__(self, record: RingRecord) -> None:
        super().__init__(record)
        self.stall = threading.Event()
        self.stalled = threading.Event()
        self.release = threading.Event()

    def read_ring(self) -> RingRecord | None:
        if self.stall.is_set():
            self.stalled.set()
            self.release.wait(60)
        return super().read_ring()


def test_the_event_loop_never_waits_on_a_thread_reading_the_register(
    servers: Servers, cache: MemcacheCluster, refused: Refused
) -> None:
    """A request thread stuck in a read of the register (under the ring's lock) leaves the
    event loop's reads answering under the lease still live, and a server failing there is
    marked down without waiting for that thread."""
    names = sorted(f"{host}:{port}" for host, port in servers)
    dead = f"{refused.pair[0]}:{refused.pair[1]}"
    source = StalledRing(RingRecord.of([*names, dead]))
    trust = process_trust([*names, dead], source, TrustSettings(timeout_s=TIMEOUT), 60.0)
    assert trust.ring.renewed() is not None  # a lease of a minute, taken now
    keys = [k for k in (b"k%d" % i for i in range(40)) if cache_owner(trust, k) != dead]
    lost = next(k for k in (b"x%d" % i for i in range(200)) if cache_owner(trust, k) == dead)
    written = MemcacheCluster([*servers, refused.pair], trust=trust).set_many({k: k for k in keys})
    assert written == dict.fromkeys(keys, Outcome.STORED)
    source.stall.set()
    stuck = threading.Thread(target=trust.ring.update, args=(lambda stored: None,))
    stuck.start()
    assert source.stalled.wait(10)  # the thread holds the ring's lock, reading

    async def main() -> None:
        client = AsyncMemcache([*servers, refused.pair], trust=trust)
        try:
            found = await asyncio.wait_for(client.gets_many(keys), 5)
            assert {k: v.value for k, v in found.items()} == {k: k for k in keys}
            with pytest.raises(CacheUnavailable):
                await asyncio.wait_for(client.gets_many([lost]), 5)
            assert trust.is_down(dead)
        finally:
            client.close()

    try:
        run_on_both_loops(main)
        assert stuck.is_alive()  # all of it answered while the register read was stuck
    finally:
        source.release.set()
        stuck.join(10)


def cache_owner(trust: ServerTrust, key: bytes) -> str:
    placement = trust.ring.current()
    assert placement is not None
    return placement.nodes[placement.owners([key])[0]]
