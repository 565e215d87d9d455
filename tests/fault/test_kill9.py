"""SIGKILL both consumers at random moments while a mixed stream is consumed."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fault.harness import (
    KILLS,
    MONGO_STORES,
    SIZE,
    ConsumerProcess,
    Model,
    compare,
    fault_settings,
    publish_mix,
    record,
)
from timeline_fanout.cli import wiring
from timeline_fanout.cli.settings import Settings


@pytest.mark.edge_stores("sqlite", *MONGO_STORES)
def test_kill_9_at_random_moments_loses_nothing(
    settings: Settings, fault_report: dict[str, Any], tmp_path: Path
) -> None:
    settings = fault_settings(settings)
    model = Model(cap=settings.timeline_max)
    consumers = [ConsumerProcess(settings, w, tmp_path) for w in ("graph", "fanout")]

    def produce() -> None:
        with wiring.publisher(settings) as publisher:
            for round_ in range(20):  # spread over the kill window
                publish_mix(publisher, model, SIZE // 20, seed=round_)
                publisher.flush()
                time.sleep(0.8)

    producer = threading.Thread(target=produce)
    producer.start()
    rng = random.Random(9)
    kills = [c for c in consumers for _ in range(KILLS)]
    rng.shuffle(kills)
    for consumer in kills:
        time.sleep(rng.uniform(2.0, 6.0))  # joins take seconds: let them work in between
        consumer.kill_and_restart()
    producer.join()
    for consumer in consumers:
        consumer.finish()

    found = compare(settings, model)
    record(
        fault_report,
        {
            "events": SIZE,
            "kills": sum(c.kills for c in consumers),
            "consumer_crashes": sum(c.crashes for c in consumers),
            **found,
        },
    )
    assert sum(c.kills for c in consumers) == 2 * KILLS
    assert sum(c.crashes for c in consumers) == 0
    assert sum(found.values()) == 0, dict(found)
