"""A consumer whose group's rebalance never completes says so, and ``--until-idle`` gives up.

Reproduction on the dev broker (Tansu), measured: a static member (FANOUT_INSTANCE_ID) killed
without leaving keeps its place; a new static member's join then never completes.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from consumers.halts import StuckWithoutAssignment
from fanout.ports import free_port
from fanout.settings import Settings
from tests.conftest import settings_env


def gauge(port: int, name: str) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    return None


def test_a_consumer_without_an_assignment_warns_and_until_idle_exits_non_zero(
    settings: Settings, tmp_path: Path
) -> None:
    settings = settings.model_copy(update={"max_poll_interval_ms": 6000, "rebalance_stuck_s": 15})
    log = tmp_path / "first.log"
    with log.open("wb") as out:
        first = subprocess.Popen(
            [sys.executable, "-m", "fanout", "-v", "consume", "graph"],
            env=settings_env(settings.model_copy(update={"instance_id": "first"})),
            stderr=out,
        )
    deadline = time.monotonic() + 60
    while b"partitions assigned" not in log.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.1)  # polling a condition: the first member holds the partitions
    first.send_signal(signal.SIGKILL)  # no LeaveGroup, no session end on the dev broker
    first.wait()

    port = free_port()
    consume = ["consume", "graph", "--until-idle", "3", "--metrics-port", str(port)]
    second = subprocess.Popen(
        [sys.executable, "-m", "fanout", "-v", *consume],
        env=settings_env(settings.model_copy(update={"instance_id": "second"})),
        stderr=subprocess.PIPE,
    )
    waited = None
    deadline = time.monotonic() + 60
    while second.poll() is None and time.monotonic() < deadline:
        if (unassigned := gauge(port, "fanout_unassigned_seconds")) and unassigned > 5:
            waited = (gauge(port, "fanout_consumer_assigned"), unassigned)
            break
        time.sleep(0.2)
    _, err = second.communicate(timeout=60)
    assert waited is not None and waited[0] == 0.0  # the metrics say so while it waits
    assert second.returncode == StuckWithoutAssignment.exit_code == 5, err.decode()
    text = err.decode()
    assert "no partition assignment for" in text and "since startup" in text  # the warning
    assert "halted (StuckWithoutAssignment, exit 5): no partition assignment for 15s" in text
