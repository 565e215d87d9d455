"""The ring record and its placement (memcache/ring.py): pure, no server needed."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from tests.held_ring import HeldRing
from timeline_fanout.graph.model.keys import KeySpace
from timeline_fanout.memcache.ring import (
    MOVED,
    PLACEMENTS_REMEMBERED,
    Placement,
    RingRecord,
    RingView,
    ServerEpoch,
)

THREE = ("10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.3:11211")
FOUR = (*THREE, "10.0.0.4:11211")
KEYS = [b"tf|fl|user%d" % i for i in range(2000)]


def owner(placement: Placement, key: bytes) -> str | None:
    at = placement.owners([key])[0]
    return None if at == MOVED else placement.nodes[at]


def name(placement: Placement, key: bytes) -> bytes:
    placement.owners([key])
    return placement.names([key]).get(key, key)


def placed(record: RingRecord, remembered: int = PLACEMENTS_REMEMBERED) -> Placement:
    """A placement of the product's keys: a list's items by its key (``KeySpace.families``)."""
    return Placement(record, KeySpace.families, remembered)


def test_every_item_of_a_list_is_placed_with_the_lists_key() -> None:
    placement = placed(RingRecord.of(FOUR))
    for key in KEYS[:200]:
        assert placement.owners([key + b"|0a1b|3", key + b"|0a1b|3|n"]) == placement.owners(
            [key, key]
        )


def test_only_keys_whose_owner_changes_are_moving() -> None:
    before, after = placed(RingRecord.of(THREE)), placed(RingRecord.of(FOUR))
    moving = placed(RingRecord.of(THREE).moved_to(FOUR))
    moved = 0
    for key in KEYS:
        if owner(before, key) == owner(after, key):
            assert owner(moving, key) == owner(before, key)
            assert name(moving, key) == key
        else:
            assert owner(moving, key) is None
            moved += 1
    assert 300 < moved < 700  # about a quarter: the keys the fourth server takes


def test_a_key_back_on_a_server_it_left_gets_a_name_never_used_there() -> None:
    grown = RingRecord.of(THREE).moved_to(FOUR).settled()
    back = grown.moved_to(THREE).settled()
    first, second, third = placed(RingRecord.of(THREE)), placed(grown), placed(back)
    for key in KEYS:
        assert owner(third, key) == owner(first, key)
        if owner(second, key) == owner(first, key):
            assert name(first, key) == name(second, key) == name(third, key) == key
        else:  # it lived on the fourth server meanwhile: its old copy missed those writes
            assert name(second, key) == key + b"~2"
            assert name(third, key) == key + b"~3"


def test_names_survive_the_remembered_placements_being_cleared() -> None:
    back = RingRecord.of(THREE).moved_to(FOUR).settled().moved_to(THREE).settled()
    once = placed(back)
    small = placed(back, 10)
    for start in range(0, 300, 7):
        batch = KEYS[start : start + 9]
        small.owners(batch)
        assert small.names(batch) == {k: name(once, k) for k in batch if name(once, k) != k}


def test_names_survive_another_threads_placements_clearing_them_meanwhile() -> None:
    """A placement is shared by a process's threads: one between its ``owners`` and its
    ``names`` must still find its keys' names after another placed past the bound."""
    back = RingRecord.of(THREE).moved_to(FOUR).settled().moved_to(THREE).settled()
    once = placed(back)
    small = placed(back, 10)
    renamed = [k for k in KEYS if name(once, k) != k][:5]
    small.owners(renamed)
    small.owners(KEYS[-11:])  # another thread, past the bound: everything forgotten
    assert small.names(renamed) == {k: name(once, k) for k in renamed}


@pytest.mark.parametrize(
    ("record", "servers"),
    [
        (RingRecord.of(THREE), THREE),  # no change
        (RingRecord.of(THREE[:1]), THREE),  # from one server
        (RingRecord.of(THREE), THREE[:1]),  # to one server
        (RingRecord.of(THREE).moved_to(FOUR), THREE),  # while moving
    ],
)
def test_a_change_that_cannot_be_made_live_is_refused(
    record: RingRecord, servers: tuple[str, ...]
) -> None:
    with pytest.raises(ValueError):
        record.moved_to(servers)


def test_a_record_reads_back_as_written() -> None:
    record = RingRecord.of(THREE).moved_to(FOUR).settled().moved_to(THREE)
    assert RingRecord.from_json(record.to_json()) == record
    assert record.version == 3 and record.moving


def test_a_view_reads_the_record_again_only_when_its_lease_ran_out() -> None:
    now = [0.0]
    source = HeldRing(RingRecord.of(THREE))
    view = RingView(RingRecord.of(FOUR), source, lease_s=5.0, clock=lambda: now[0])
    assert view.current() is None  # never read: no lease
    assert view.renewed() is not None and view.record.servers == THREE
    now[0] = 4.9
    source.record = RingRecord.of(THREE).moved_to(FOUR)
    assert view.renewed() is not None and not view.record.moving and source.reads == 1
    now[0] = 5.0
    assert view.current() is None
    placement = view.renewed()
    assert placement is not None and placement.record.moving and source.reads == 2


def test_a_view_that_cannot_read_the_record_places_no_key() -> None:
    now = [0.0]
    source = HeldRing(RingRecord.of(THREE))
    view = RingView(RingRecord.of(THREE), source, lease_s=1.0, clock=lambda: now[0])
    assert view.renewed() is not None
    now[0] = 1.5
    source.broken = True
    assert view.renewed() is None


class SlowRing(HeldRing):
    """A shared place that answers slower than a lease: each read moves the view's clock past
    it. The first read waits for ``release`` (``entered`` is set once it is under way)."""

    def __init__(self, record: RingRecord, now: list[float], lease_s: float) -> None:
        super().__init__(record)
        self.now, self.lease_s = now, lease_s
        self.entered, self.release = threading.Event(), threading.Event()

    def read_ring(self) -> RingRecord | None:
        if self.reads == 0:
            self.entered.set()
            assert self.release.wait(10)
        self.now[0] += 2 * self.lease_s
        return super().read_ring()


def waiting_in(thread: threading.Thread, function: str) -> bool:
    """Whether ``thread`` is blocked inside ``function`` now (its stack, read from outside)."""
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False


def test_threads_finding_a_slow_read_under_way_take_its_outcome_and_read_nothing() -> None:
    """A register slower than a lease gives no lease. A thread that finds a read under way
    waits for it and takes its answer: a call costs one read, not a queue of one per thread."""
    now = [0.0]
    source = SlowRing(RingRecord.of(THREE), now, lease_s=1.0)
    view = RingView(RingRecord.of(THREE), source, lease_s=1.0, clock=lambda: now[0])
    answers: list[object] = []
    first = threading.Thread(target=lambda: answers.append(view.renewed()))
    first.start()
    assert source.entered.wait(10)
    others = [threading.Thread(target=lambda: answers.append(view.renewed())) for _ in range(3)]
    for thread in others:
        thread.start()
    deadline = time.monotonic() + 10
    while not all(waiting_in(t, "_read_shared") and not waiting_in(t, "read_ring") for t in others):
        assert time.monotonic() < deadline
        time.sleep(0.001)
    source.release.set()
    for thread in [first, *others]:
        thread.join(10)
    assert source.reads == 1
    assert view.current() is None and answers == [None, None, None, None]


def test_a_view_of_a_store_without_a_record_uses_the_configured_servers() -> None:
    view = RingView(RingRecord.of(THREE), HeldRing(None), lease_s=1.0, clock=lambda: 0.0)
    placement = view.renewed()
    assert placement is not None and placement.nodes == sorted(THREE)


def test_names_and_moving_keys_are_those_of_the_history_walked_key_by_key() -> None:
    from pymemcache.client.rendezvous import RendezvousHash

    five = (*FOUR, "10.0.0.5:11211")
    steps = [FOUR, THREE, five, FOUR[1:], five]
    record = RingRecord.of(THREE)
    for servers in steps:
        moving = record.moved_to(servers)
        for state in (moving, moving.settled()):
            placement = placed(state)
            keys = KEYS[:400]
            owners = placement.owners(keys)
            names = placement.names(keys)
            for key, at in zip(keys, owners, strict=True):
                fam = KeySpace.families([key])[0].decode()
                seen = [RendezvousHash(list(ring)).get_node(fam) for ring in state.rings]
                if state.moving and seen[-1] != seen[-2]:
                    assert at == MOVED and key not in names
                    continue
                history = seen[:-1] if state.moving else seen
                assert placement.nodes[at] == history[-1]
                run = len(history) - 1
                while run and history[run - 1] == history[-1]:
                    run -= 1
                assert names.get(key, key) == (key + b"~%x" % (1 + run) if run else key)
        record = moving.settled()


def test_every_process_uses_the_lease_the_record_holds_whatever_its_setting() -> None:
    """A writer's hold must outlast every reader's lease: the first process records its lease
    in the record, and every process, whatever its own setting, leases and holds that long."""
    source = HeldRing(None)
    short = RingView(RingRecord.of(THREE), source, lease_s=0.5)
    assert short.renewed() is not None
    assert source.record is not None and source.record.lease_s == 0.5
    long = RingView(RingRecord.of(THREE), source, lease_s=4.0)
    assert long.renewed() is not None
    assert (long.lease_s, long.stale_s) == (0.5, 0.5)
    assert RingRecord.from_json(source.record.to_json()) == source.record


def test_a_record_without_a_lease_gets_one_before_any_key_is_used() -> None:
    """A record written without a lease (the first version of a change, an older process):
    the first process to read it records its own, by compare-and-set, before using it."""
    unstamped = RingRecord.of(THREE)
    assert RingRecord.from_json(unstamped.to_json()).lease_s == 0.0
    source = HeldRing(unstamped)
    view = RingView(RingRecord.of(THREE), source, lease_s=2.0)
    assert view.renewed() is not None
    assert source.record == unstamped.with_lease(2.0) and view.lease_s == 2.0
    grown = source.record.moved_to(FOUR)
    assert (
        grown.lease_s == 2.0 and grown.settled().with_epoch(FOUR[0], ServerEpoch()).lease_s == 2.0
    )
