"""When ``--until-idle`` starts counting: from the assignment if this member holds every
partition, otherwise not before a session timeout (a dead predecessor may hold the rest)."""

from __future__ import annotations

import time
from collections.abc import Callable

from timeline_fanout.cli.settings import Settings
from timeline_fanout.consumers.kafka_source import KafkaSource

# The settle time is derived from max.poll.interval.ms (45 s + 2 s: longer than these tests),
# while the broker's session stays short: the dev broker holds a JoinGroup for half of it.
SETTLE_MS = 45_000
QUICK_JOIN = {"session.timeout.ms": 6000}


def source(settings: Settings) -> KafkaSource:
    return KafkaSource(
        settings.kafka,
        settings.group,
        [settings.topics.graph],
        max_poll_interval_ms=SETTLE_MS,
        extra=QUICK_JOIN,
    )


def poll_until(sources: list[KafkaSource], done: Callable[[], bool], timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for source in sources:
            source.poll_batch(10, 0.1)
        if done():
            return
    raise AssertionError("the group did not settle")


def test_idle_counts_from_the_assignment_when_holding_every_partition(
    settings: Settings,
) -> None:
    alone = source(settings)
    try:
        assert alone.await_assignment(30)
        poll_until([alone], lambda: alone.idle_for() >= 1.0, timeout=10)
    finally:
        alone.close()


def test_idle_waits_out_the_session_when_holding_a_share(settings: Settings) -> None:
    """Two members split the six partitions: either could be a restarted consumer whose dead
    predecessor still holds some, so neither counts idle time yet."""
    started = time.monotonic()
    pair = [source(settings) for _ in range(2)]
    try:
        poll_until(pair, lambda: all(len(s._assigned) == 3 for s in pair))
        for _ in range(10):
            poll_until(pair, lambda: True)
            assert [s.idle_for() for s in pair] == [0.0, 0.0]
        assert time.monotonic() - started < SETTLE_MS / 1000  # still inside the settle time
    finally:
        for member in pair:
            member.close()
