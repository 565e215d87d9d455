"""Duplicates and reordering: replaying the same offsets twice and applying a batch twice leave
the state exactly as the events say."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import run_cli
from tests.fault.harness import SIZE, Model, compare, fault_settings, publish_mix, record
from tests.kafka_helpers import read_topic
from timeline_fanout.cli import wiring
from timeline_fanout.cli.settings import Settings
from timeline_fanout.consumers import Positioned, decode_message
from timeline_fanout.consumers.fanout_apply import FANOUT_EVENTS
from timeline_fanout.consumers.graph_apply import GRAPH_EVENTS


def test_replays_and_double_delivery_change_nothing(
    settings: Settings, fault_report: dict[str, Any], tmp_path: Path
) -> None:
    settings = fault_settings(settings)
    model = Model(cap=settings.timeline_max)
    with wiring.publisher(settings) as publisher:
        publish_mix(publisher, model, SIZE, seed=5)
    for which in ("graph", "fanout"):
        assert run_cli(settings, "consume", which, "--until-idle", "3").returncode == 0
    baseline = compare(settings, model)

    for _ in range(2):  # the same offsets, twice
        for which in ("graph", "fanout"):
            done = run_cli(settings, "replay", which, "--from-beginning", "--until-idle", "3")
            assert done.returncode == 0, done.stderr.decode()
    after_replays = compare(settings, model)

    # The same batch delivered twice, straight into the appliers, in reverse order the second
    # time: positions make the order irrelevant. (Appliers only: a Kafka consumer that joined
    # its group and never polled can hang in ``close()`` against Tansu for many minutes.)
    store = wiring.edge_store(settings)
    for applier, topic, accepted in (
        (wiring.graph_applier(settings), settings.topics.graph, GRAPH_EVENTS),
        (wiring.fanout_applier(settings), settings.topics.posts, FANOUT_EVENTS),
    ):
        messages = read_topic(settings.kafka, topic, expected=10**9, timeout=5)  # everything
        items = [d for m in messages if isinstance(d := decode_message(m, accepted), Positioned)]
        assert items
        applier.apply(items)
        applier.apply(list(reversed(items)))
    store.close()
    twice = compare(settings, model)
    record(fault_report, {"events": SIZE, **twice})
    assert sum(baseline.values()) == 0, dict(baseline)
    assert sum(after_replays.values()) == 0, dict(after_replays)
    assert sum(twice.values()) == 0, dict(twice)
