"""A static member that crashed holds its partitions until its session times out, then they move;
while it holds the rebalance up, the others say so and ``--until-idle`` gives up (exit 5).

Static members (FANOUT_INSTANCE_ID) send no LeaveGroup when they stop, so the coordinator learns
of a SIGKILLed one only when its session expires (``session.timeout.ms``, derived from
``max.poll.interval.ms`` in ``consumers.kafka_source``). A member joining meanwhile waits in the
rebalance for the dead one. Both tests kill a static member and start another; they differ only
in the dead member's session timeout: 6 s (the partitions move within the new member's patience)
or 45 s (longer than the new member's 15 s stuck limit).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import settings_env
from timeline_fanout.cli import wiring
from timeline_fanout.cli.settings import Settings
from timeline_fanout.consumers.halts import StuckWithoutAssignment
from timeline_fanout_devstack.ports import free_port

pytestmark = pytest.mark.apache_kafka


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


def wait_for_line(log: Path, line: bytes, timeout: float = 60) -> float:
    """Poll a process's log for ``line``; the monotonic time it was first seen."""
    deadline = time.monotonic() + timeout
    while line not in log.read_bytes():
        assert time.monotonic() < deadline, f"no {line!r} in {log}"
        time.sleep(0.05)
    return time.monotonic()


def crashed_static_member(settings: Settings, log: Path) -> float:
    """A static graph consumer that got the partitions and was SIGKILLed; when it died."""
    with log.open("wb") as out:
        first = subprocess.Popen(
            [sys.executable, "-m", "timeline_fanout", "-v", "consume", "graph"],
            env=settings_env(settings.model_copy(update={"instance_id": "first"})),
            stderr=out,
        )
    wait_for_line(log, b"partitions assigned")
    first.send_signal(signal.SIGKILL)  # no LeaveGroup: the coordinator must notice by itself
    first.wait()
    return time.monotonic()


def test_a_crashed_static_member_expires_after_its_session_timeout_and_its_partitions_move(
    settings: Settings, tmp_path: Path
) -> None:
    settings = settings.model_copy(update={"max_poll_interval_ms": 6000})  # 6 s sessions
    killed_at = crashed_static_member(settings, tmp_path / "first.log")
    with wiring.publisher(settings) as publisher:
        for i in range(60):  # keyed by followee: spread over the six partitions
            publisher.publish({"type": "follow", "follower": f"f{i}", "followee": f"star{i}"})

    log = tmp_path / "second.log"
    with log.open("wb") as out:
        second = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "timeline_fanout",
                "-v",
                "consume",
                "graph",
                "--until-idle",
                "3",
            ],
            env=settings_env(settings.model_copy(update={"instance_id": "second"})),
            stderr=out,
        )
    assigned_at = wait_for_line(log, b"partitions assigned")
    assert second.wait(timeout=60) == 0, log.read_text()
    text = log.read_text()
    topic = settings.topics.graph
    every = str(sorted((topic, p) for p in range(6)))
    assert f"partitions assigned: {every}" in text  # the dead member's partitions moved
    assert "applied 60" in text
    # Not before the dead member's session could expire (nothing else tells the coordinator):
    # it runs from the member's last heartbeat, up to one interval (librdkafka's 3 s) before
    # the kill.
    assert assigned_at - killed_at >= 6.0 - 3.0


def test_a_rebalance_held_up_by_a_crashed_member_warns_and_until_idle_exits_5(
    settings: Settings, tmp_path: Path
) -> None:
    # The crashed member's session is 45 s; the next member gives up after 15 s without one.
    crashed_static_member(
        settings.model_copy(update={"max_poll_interval_ms": 45000}), tmp_path / "first.log"
    )
    settings = settings.model_copy(update={"max_poll_interval_ms": 6000, "rebalance_stuck_s": 15})
    port = free_port()
    consume = ["consume", "graph", "--until-idle", "3", "--metrics-port", str(port)]
    second = subprocess.Popen(
        [sys.executable, "-m", "timeline_fanout", "-v", *consume],
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
