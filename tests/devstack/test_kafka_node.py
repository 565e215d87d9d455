"""One Apache Kafka node: when another process took a port picked for it before the JVM bound
it, the node is started again on new ports and answers there with its own cluster id."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from timeline_fanout_devstack import kafka_node

pytestmark = pytest.mark.apache_kafka


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


def test_a_node_whose_controller_port_was_taken_starts_again_on_free_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken_port: int
) -> None:
    picks: list[int] = []
    real = kafka_node.free_port

    def second_pick_taken() -> int:  # the first attempt's controller port
        picks.append(taken_port if len(picks) == 1 else real())
        return picks[-1]

    monkeypatch.setattr(kafka_node, "free_port", second_pick_taken)
    node = kafka_node.start_single_node(tmp_path / "node", tmp_path / "logs")
    try:
        assert len(picks) == 4  # two attempts, two ports each
        assert taken_port not in (node.node.broker_port, node.node.controller_port)
        assert kafka_node.cluster_id_at(node.node.bootstrap) == node.cluster_id
        assert "BindException" in (tmp_path / "logs" / "kafka.log").read_text()
    finally:
        os.kill(node.pid, signal.SIGKILL)


def test_a_cluster_id_never_reads_as_an_option_to_the_storage_tool() -> None:
    """One random id in 64 starts with ``-``; the storage tool would take it for an option."""
    assert not any(kafka_node.new_cluster_id().startswith("-") for _ in range(5_000))
