"""A pulse: what an applier calls between the steps of a long batch.

librdkafka puts a member out of its group when the process does not poll for
``max.poll.interval.ms``. Retries already poll (paused) while they wait; a *successful* apply can
also outlast the interval (a batch of posts whose authors have thousands of followers each is
millions of appends), and a member put out mid-batch has its commit refused and meets the same
long batch again: a livelock. So appliers work in bounded steps and call ``pulse()`` between
them; the consume loop's pulse polls the paused consumer once the last poll is a third of the
interval old, and raises ``Abandoned`` if the batch's partitions were revoked meanwhile.
Callers outside a consume loop (tests, benchmarks) need no pulse: ``no_pulse``.
"""

from __future__ import annotations

from collections.abc import Callable

Pulse = Callable[[], None]


def no_pulse() -> None:
    """The pulse of an applier driven outside a consume loop: nothing to keep alive."""
