"""What a server that comes back can never hand out: a reply from an epoch revoked while the
request was under way, and an item created late by a write it took while hung.

Three memcached processes of the test's own; each client is a process of the product with its
own ``ServerTrust``, all sharing one register (docs/design/cache-register.md)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

from tests.held_ring import HeldRing, process_trust
from timeline_fanout.memcache import MemcacheCluster
from timeline_fanout.memcache.exchange import PIPELINE
from timeline_fanout.memcache.pools import ServerPipe
from timeline_fanout.memcache.ring import EpochState, RingRecord, ServerEpoch
from timeline_fanout.memcache.trust import ServerTrust, TrustSettings
from timeline_fanout.memcache.wire import CacheUnavailable, Item, Outcome
from timeline_fanout_devstack.memcached_processes import own_server, stop

Server = tuple[subprocess.Popen[bytes], tuple[str, int]]
QUICK = TrustSettings(timeout_s=0.5, retry_s=0.3)
LEASE_S = 0.2


@pytest.fixture
def three() -> Iterator[list[Server]]:
    with own_server() as a, own_server() as b, own_server() as c:
        yield sorted([a, b, c], key=lambda s: f"{s[1][0]}:{s[1][1]}")


def names(servers: list[Server]) -> list[str]:
    return [f"{host}:{port}" for _, (host, port) in servers]


def process(
    servers: list[Server],
    register: HeldRing,
    trust: ServerTrust | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> MemcacheCluster:
    trust = trust or process_trust(names(servers), register, QUICK, LEASE_S)
    return MemcacheCluster([address for _, address in servers], trust=trust, sleep=sleep)


def key_on(cache: MemcacheCluster, server: str) -> bytes:
    return next(k for k in (b"k%d" % i for i in range(10_000)) if cache.server_for(k) == server)


def pipes_of(pipe: type[ServerPipe]) -> Callable[[str], ServerPipe]:
    """A connection factory (``MemcacheCluster(connect=...)``) making ``pipe``s to the named
    server, with the test's timeout."""

    def connect(node: str) -> ServerPipe:
        host, port = node.rsplit(":", 1)
        return pipe(host, int(port), QUICK.timeout_s)

    return connect


class Clock:
    """A reader's clock, moved by the test: the lease it checked before a request runs out
    while the request is under way (as when another server hangs meanwhile)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """A wait passed on this clock."""
        self.now += max(0.0, seconds)


def test_a_reply_that_outlived_its_lease_is_dropped_when_its_epoch_was_revoked(
    three: list[Server],
) -> None:
    register = HeldRing(None)
    writer = process(three, register)
    victim = names(three)[0]
    key = key_on(writer, victim)
    writer.set_many({key: b"before"})
    clock = Clock()
    late: list[bool] = []  # armed: the reply arrives after the reader's lease ran out

    class LatePipe(ServerPipe):
        """The moment between a request and its reply, made exact."""

        def send(self, payload: bytes) -> None:
            super().send(payload)
            if late:
                clock.now += 5.0

    reader = MemcacheCluster(
        [address for _, address in three],
        trust=process_trust(names(three), register, QUICK, 1.0, clock),
        connect=pipes_of(LatePipe),
    )
    assert reader.get_many([key]) == {key: b"before"}  # a lease on the record
    # The writer missed a write on the victim: its epoch is revoked in the register and the
    # writer's call returns a lease later (the writer's own clock), then it commits.
    writer.trust.mark_down(victim)
    writer.missed([key], writer.checkpoint())
    assert register.record is not None
    assert register.record.epoch(victim).state is EpochState.DOWN
    late.append(True)
    assert reader.get_many([key]) == {}  # unanswered, not the revoked epoch's item
    assert reader.available([key]) == [False]  # until it is back under its new epoch


def test_replies_a_server_gave_before_failing_mid_read_are_dropped_once_its_epoch_was_revoked(
    three: list[Server],
) -> None:
    """A read of more than one pipeline from one server: the server answers the first late,
    after a writer revoked its epoch and committed, then fails on the next. What it did answer
    is judged against the record like any reply, never handed out for failing later."""
    register = HeldRing(None)
    writer = process(three, register)
    victim = names(three)[0]
    mine = [k for k in (b"k%d" % i for i in range(20_000)) if writer.server_for(k) == victim]
    keys = mine[: PIPELINE + 100]
    assert len(keys) > PIPELINE  # two pipelines to the victim
    writer.set_many(dict.fromkeys(keys, b"before"))
    clock = Clock()
    armed: list[str] = []  # "late": the next reply arrives late; "fail": the next send fails

    class LateThenFailing(ServerPipe):
        """The first pipeline's reply arrives after the revocation; the next send fails."""

        def receive_values(self, count: int) -> list[Item | None]:
            found = super().receive_values(count)
            if armed == ["late"]:
                writer.trust.mark_down(victim)  # the writer missed a write there, and commits
                writer.missed([keys[0]], writer.checkpoint())
                clock.now += 5.0  # the reader's lease ran out while it waited
                armed[0] = "fail"
            return found

        def send(self, payload: bytes) -> None:
            if armed == ["fail"]:
                self.close()
                raise CacheUnavailable(f"memcached {self.name}: killed")
            super().send(payload)

    reader = MemcacheCluster(
        [address for _, address in three],
        trust=process_trust(names(three), register, QUICK, 1.0, clock),
        connect=pipes_of(LateThenFailing),
    )
    assert reader.get_many(keys[:1]) == {keys[0]: b"before"}  # a lease on the record
    armed.append("late")
    assert reader.get_many(keys) == {}  # none of the revoked epoch's items
    assert armed == ["fail"]
    assert register.record is not None
    assert register.record.epoch(victim).state is EpochState.DOWN


def test_an_add_left_unanswered_by_a_hung_server_revokes_it_so_a_late_add_is_never_read(
    three: list[Server],
) -> None:
    register = HeldRing(None)
    writer = process(three, register)
    (proc, _), victim = three[0], names(three)[0]
    key = key_on(writer, victim)
    suffix = writer.trust.ring.record.epoch(victim).suffix
    stop(proc)
    try:
        writer.add_many({key: b"built from what the store held before"})  # runs on resume
    finally:
        proc.send_signal(signal.SIGCONT)
    # The server took the ADD on resuming: the item exists under the epoch it was sent with.
    raw = MemcacheCluster([three[0][1]])
    for _ in range(100):
        if raw.get_many([key + suffix]):
            break
        raw.wait(0.05)
    assert raw.get_many([key + suffix]) == {key + suffix: b"built from what the store held before"}
    late = process(three, register)  # a process that never saw the server hang
    late.settle()  # back: returning, then up a lease later, under a new epoch
    assert late.trust.ring.record.epoch(victim).suffix != suffix
    assert late.available([key]) == [True]
    assert late.get_many([key]) == {}


def test_a_returning_server_takes_writes_creates_nothing_and_is_read_once_up(
    three: list[Server],
) -> None:
    """Between down and up a server is written under its new epoch (a write skipped there
    would be missed), but no item is created there (an ADD is answered and not sent, a SET
    only replaces) and the read paths leave it alone: a process still holding a lease on
    ``down`` may skip a write to it until a lease after."""
    victim = names(three)[0]
    returning = RingRecord.of(names(three)).with_epoch(
        victim, ServerEpoch("5e7b4c01", EpochState.RETURNING)
    )
    register = HeldRing(returning)
    clock = Clock()  # the writer's: returning lasts until the test lets a lease pass
    sleep: list[Callable[[float], None]] = [lambda seconds: None]  # holds pass at once
    trust = process_trust(names(three), register, QUICK, 5.0, clock)
    writer = process(three, register, trust, lambda seconds: sleep[0](seconds))
    key = key_on(writer, victim)
    named = key + b"@5e7b4c01"
    raw = MemcacheCluster([three[0][1]])
    assert writer.available([key]) == [False]
    assert writer.add_many({key: b"built"}) == {key: Outcome.STORED}  # answered, not sent
    assert writer.set_many({key: b"mark"}) == {key: Outcome.STORED}  # a REPLACE: nothing there
    assert raw.get_many([named]) == {}
    assert raw.set_many({named: b"+a "}) == {named: Outcome.STORED}
    assert writer.append_many({key: b"+b "}) == {key: Outcome.STORED}  # sent
    assert raw.get_many([named]) == {named: b"+a +b "}
    assert writer.set_many({key: b"+a +b +c "}) == {key: Outcome.STORED}  # overwrites
    assert raw.get_many([named]) == {named: b"+a +b +c "}
    clock.now += 5.0
    sleep[0] = clock.advance  # from here on, waits pass on the writer's clock
    writer.settle()  # up a lease after it was first seen returning, and usable a lease later
    assert register.record is not None
    assert register.record.epoch(victim) == ServerEpoch("5e7b4c01", EpochState.UP)
    assert writer.get_many([key]) == {key: b"+a +b +c "}


def test_a_write_missed_under_a_returning_epoch_revokes_it_though_it_went_up_meanwhile(
    three: list[Server],
) -> None:
    """The writer's lease says returning; another process brings the server up under the same
    epoch meanwhile. The write the server missed is missed by that epoch's items: the
    revocation must not be skipped because the state it was sent under is gone."""
    victim = names(three)[0]
    epoch = ServerEpoch("5e7b4c02", EpochState.RETURNING)
    register = HeldRing(RingRecord.of(names(three)).with_epoch(victim, epoch))
    clock = Clock()
    trust = process_trust(names(three), register, QUICK, 60.0, clock)
    writer = process(three, register, trust, clock.advance)  # the revocation's wait
    key = key_on(writer, victim)
    assert writer.available([key]) == [False]  # the record read: returning
    up = ServerEpoch(epoch.value, EpochState.UP)
    assert register.record is not None
    assert register.swap_ring(register.record, register.record.with_epoch(victim, up))
    writer.trust.mark_down(victim)
    writer.append_many({key: b"+w "})  # not sent, under the lease that says returning
    assert clock.now >= 60.0  # held a lease period
    assert register.record is not None
    # Revoked: a new epoch (already on its way back, since the server answers this writer's
    # probe), never the one whose items missed the write.
    assert register.record.epoch(victim).value != epoch.value


def test_a_write_to_a_revoked_server_returns_only_once_older_leases_ran_out(
    three: list[Server],
) -> None:
    """A reader holds a lease on the old epoch; a writer revokes the server. Another writer
    then writes to it (skipped while down, or sent under the new epoch while it returns) and
    commits: the reader, whose lease is still live, must not read the old epoch's item, which
    lacks that write. So the second writer's call returns only once the old leases ran out."""
    register = HeldRing(None)
    first, second, reader = (
        process(three, register, process_trust(names(three), register, QUICK, 1.0), sleep)
        for sleep in (lambda seconds: None, time.sleep, time.sleep)  # first: holding its batch
    )
    victim = names(three)[0]
    key, other = [k for k in (b"k%d" % i for i in range(10_000)) if first.server_for(k) == victim][
        :2
    ]
    first.set_many({key: b"a", other: b"a"})
    assert reader.get_many([key]) == {key: b"a"}  # a lease on the old epoch
    first.trust.mark_down(victim)
    first.missed([other], first.checkpoint())  # revoked (its own wait is another story)
    assert register.record is not None and register.record.epoch(victim).state is EpochState.DOWN
    second.append_many({key: b" w2"})  # free of revocation, not of the wait
    assert reader.get_many([key]) in ({}, {key: b"a w2"})  # never the item that lacks it


def test_a_write_every_server_missed_costs_one_register_write_and_one_lease(
    three: list[Server],
) -> None:
    """Every server of the fleet missed the same exchange: the writer records all the
    revocations in one compare-and-set and waits one lease, not one lease per server (which
    a consumer between two polls cannot afford)."""
    register = HeldRing(None)
    clock = Clock()
    trust = process_trust(names(three), register, QUICK, 5.0, clock)
    writer = process(three, register, trust, clock.advance)
    keys = [key_on(writer, server) for server in names(three)]
    writer.set_many(dict.fromkeys(keys, b"v"))  # every server up, under a lease
    swaps = []
    swap = register.swap_ring

    def counted(expected: RingRecord | None, record: RingRecord) -> bool:
        swaps.append(record)
        return swap(expected, record)

    register.swap_ring = counted  # type: ignore[method-assign]
    for server in names(three):
        writer.trust.mark_down(server)
    began = clock.now
    writer.set_many(dict.fromkeys(keys, b"w"))
    # The first change revoked all three (the next ones bring them back: they answer again).
    assert {swaps[0].epoch(s).state for s in names(three)} == {EpochState.DOWN}
    assert 5.0 <= clock.now - began < 10.0  # one lease


def test_a_readers_fill_it_could_not_send_revokes_nothing_and_waits_for_nothing(
    three: list[Server],
) -> None:
    """This process marked a server down (another thread's read timed out); a reader's fill
    to it is not sent. Nothing was written and no commit follows a fill, so the server keeps
    its epoch for every process, and the reader does not wait."""
    register = HeldRing(None)
    clock = Clock()
    trust = process_trust(names(three), register, QUICK, 5.0, clock)
    reader = process(three, register, trust, clock.advance)
    victim = names(three)[0]
    key = key_on(reader, victim)
    reader.set_many({key: b"v"})
    item = reader.gets_many([key])[key]
    before = register.record
    trust.mark_down(victim)
    began = clock.now
    assert reader.fills().cas_many({key: (b"filled", item.cas)}) == {key: Outcome.NOT_FOUND}
    # An ADD is answered as a server that keeps nothing would: taken, and gone.
    assert reader.fills().add_many({key: b"filled"}) == {key: Outcome.STORED}
    assert register.record == before  # not revoked
    assert clock.now == began  # not held


def test_a_write_answered_while_another_thread_marked_its_server_down_stands(
    three: list[Server],
) -> None:
    """The server answered the write; only this process's view of it changed meanwhile (another
    thread's timeout). Only the register decides whether replies stand: the write is stored and
    the server's epoch is not revoked."""
    register = HeldRing(None)
    trust = process_trust(names(three), register, QUICK, 5.0)
    victim = names(three)[0]

    class MarkedDownMidReply(ServerPipe):
        def receive(self, count: int) -> bytes:
            replies = super().receive(count)
            if self.name == victim:
                trust.mark_down(victim)  # as another thread would, between send and reply
            return replies

    writer = MemcacheCluster(
        [address for _, address in three],
        trust=trust,
        connect=pipes_of(MarkedDownMidReply),
        sleep=lambda s: None,
    )
    key = key_on(writer, victim)
    before = register.record
    assert writer.set_many({key: b"v"}) == {key: Outcome.STORED}
    assert register.record == before
    trust.mark_up(victim)
    assert writer.get_many([key]) == {key: b"v"}
