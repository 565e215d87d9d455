"""Group membership under faults: every memcached server down for longer than
max.poll.interval.ms (the consumers retry, paused and polling, and are never put out of their
group; one server of three down is not such an outage: writes go on), and a group that grows
and shrinks mid-stream (rebalances, a member stopped with SIGTERM)."""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from tests.fault.harness import (
    SIZE,
    ConsumerProcess,
    Model,
    compare,
    fault_settings,
    publish_mix,
    record,
    run_under_fault,
)
from timeline_fanout.cli import wiring
from timeline_fanout.cli.settings import Settings
from timeline_fanout_devstack import stack


def every_memcached_down(for_s: float) -> None:
    """Every server of the stack killed for ``for_s`` seconds, then restarted empty: nothing
    can record what a server missed, so the consumers' writes fail and are retried."""
    with ExitStack() as down:
        for i in range(stack.MEMCACHED_SERVERS):
            down.enter_context(stack.memcached_killed(f"memcached{i}"))
        time.sleep(for_s)


def test_a_memcached_outage_longer_than_max_poll_interval_keeps_consumers_in_their_group(
    settings: Settings, fault_report: dict[str, Any], tmp_path: Path
) -> None:
    """Every memcached server down longer than the time allowed between polls: the consumers
    record the writes they miss in the register and go on (nothing to retry), stay in their
    group, and the lists and timelines end exact."""
    settings = fault_settings(settings)
    outage = settings.max_poll_interval_ms / 1000 + 2  # 8 s down, against 6 s between polls
    model, consumers = run_under_fault(
        settings,
        tmp_path,
        lambda: every_memcached_down(outage),
        seed=4,
    )
    found = compare(settings, model)
    retries = sum(c.retries() for c in consumers)
    kicked = sum(c.kicked() for c in consumers)
    record(
        fault_report,
        {
            "events": SIZE,
            "memcached_restarts": stack.MEMCACHED_SERVERS,
            "outage_s": int(outage),
            "retries": retries,
            "kicked": kicked,
            "consumer_crashes": sum(c.crashes for c in consumers),
            **found,
        },
    )
    record_after = wiring.ring_source(settings).read_ring()
    assert record_after is not None  # the outage was met: every server revoked in the register
    assert {server for server, epoch in record_after.epochs if epoch.value} >= set(
        record_after.servers
    )
    assert kicked == 0  # ...without leaving the group
    assert sum(c.crashes for c in consumers) == 0
    assert sum(found.values()) == 0, dict(found)


def test_members_joining_and_leaving_mid_stream_converge_exactly(
    settings: Settings, fault_report: dict[str, Any], tmp_path: Path
) -> None:
    """Dynamic members (no FANOUT_INSTANCE_ID): a second member per consumer joins while events
    flow, then the first is stopped with SIGTERM while events still flow; the group rebalances
    each time and the survivors take over."""
    settings = fault_settings(settings)
    model = Model(cap=settings.timeline_max)
    kinds = ("graph", "fanout")
    first = [ConsumerProcess(settings, which, tmp_path, member=None) for which in kinds]
    (tmp_path / "b").mkdir()
    second: list[ConsumerProcess] = []
    rounds = 20
    phase = {round_: (threading.Event(), threading.Event()) for round_ in (6, 13)}

    def produce() -> None:
        with wiring.publisher(settings) as publisher:
            for round_ in range(rounds):
                publish_mix(publisher, model, SIZE // rounds, seed=700 + round_)
                publisher.flush()
                if round_ in phase:  # the group changes here, with events still flowing
                    reached, changed = phase[round_]
                    reached.set()
                    changed.wait(timeout=180)
                time.sleep(0.3)

    producer = threading.Thread(target=produce, daemon=True)
    try:
        for consumer in first:  # the group is formed before anything flows
            consumer.wait_assigned(1)
        producer.start()
        reached, changed = phase[6]
        reached.wait()
        second = [ConsumerProcess(settings, w, tmp_path / "b", member=None) for w in kinds]
        for consumer in [*first, *second]:  # the rebalance is through: all hold partitions
            consumer.wait_assigned(2 if consumer in first else 1)
        changed.set()
        reached, changed = phase[13]
        reached.wait()
        for consumer in first:  # SIGTERM while events flow: finish the batch, commit, leave
            consumer.stop()
        for consumer in second:  # the leavers' partitions are taken over
            consumer.wait_assigned(2)
        changed.set()
        producer.join()
        for consumer in second:
            consumer.finish()
    finally:
        for phase_events in phase.values():
            phase_events[1].set()
        for consumer in [*first, *second]:
            consumer.kill()

    found = compare(settings, model)
    everyone = first + second
    crashes = sum(c.crashes for c in everyone)
    record(
        fault_report,
        {
            "events": SIZE,
            "member_changes": len(second) + len(first),
            "kicked": sum(c.kicked() for c in everyone),
            "consumer_crashes": crashes,
            **found,
        },
    )
    assert crashes == 0
    assert sum(found.values()) == 0, dict(found)
