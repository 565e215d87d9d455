"""A replay of the whole graph topic running over live consumers (an operator's `fanout replay
graph --from-beginning` on a live system): it must change nothing. Old follows re-applied after
newer unfollows and removals must not resurrect edges (positions order them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import settings_env
from tests.fault.harness import (
    MONGO_BOTH_MODES,
    SIZE,
    compare,
    fault_settings,
    record,
    run_under_fault,
)
from timeline_fanout.cli.settings import Settings


@pytest.mark.edge_stores("sqlite", *MONGO_BOTH_MODES)
def test_a_replay_over_live_consumers_changes_nothing(
    settings: Settings, fault_report: dict[str, Any], tmp_path: Path
) -> None:
    settings = fault_settings(settings)
    replays: list[subprocess.Popen[bytes]] = []

    def replay() -> None:
        with (tmp_path / "replay.log").open("ab") as log:
            replays.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "timeline_fanout",
                        "replay",
                        "graph",
                        "--from-beginning",
                        "--until-idle",
                        "5",
                    ],
                    env=settings_env(settings),
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                )
            )

    model, consumers = run_under_fault(settings, tmp_path, replay, seed=7)
    assert replays[0].wait(timeout=300) == 0, (tmp_path / "replay.log").read_text()
    found = compare(settings, model)
    record(
        fault_report,
        {
            "events": SIZE,
            "removals": model.removals,
            "replays_over_live": 1,
            "consumer_crashes": sum(c.crashes for c in consumers),
            **found,
        },
    )
    assert sum(c.crashes for c in consumers) == 0
    assert sum(found.values()) == 0, dict(found)
