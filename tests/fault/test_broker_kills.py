"""Broker failures: three Apache Kafka nodes, a topic with three replicas and
``min.insync.replicas=2``, an idempotent producer with ``acks=all``; the leader of most
partitions is SIGKILLed mid-stream, brought back, and then another leader is killed. Every
acknowledged event is read back exactly once, in the order it was produced within its
partition, and nothing unacknowledged appears.

Three JVMs beside the suite's four test stacks would crowd two cores: the scenario runs only
with FANOUT_BROKER_FAULTS=1, which ``.ci/run`` sets for a run of its own (~50 s).
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from tests.fault.harness import record
from timeline_fanout_devstack import kafka_node

pytestmark = [
    pytest.mark.apache_kafka,
    pytest.mark.skipif(
        os.environ.get("FANOUT_BROKER_FAULTS") != "1",
        reason="three-broker fault test: set FANOUT_BROKER_FAULTS=1 to run it",
    ),
]

NODES = 3
PARTITIONS = 6
EVENTS = 30_000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[kafka_node.RunningNode]]:
    nodes = kafka_node.start_cluster(tmp_path / "cluster", tmp_path / "logs", NODES, 120)
    yield nodes
    for node in nodes:
        os.kill(node.pid, signal.SIGKILL)


def in_order(events: list[int]) -> bool:
    """One producer sent them in increasing order; idempotence keeps that order per partition."""
    return all(a < b for a, b in itertools.pairwise(events))


def leaders(admin: AdminClient, topic: str) -> Counter[int]:
    metadata = admin.list_topics(topic, timeout=10).topics[topic]
    return Counter(p.leader for p in metadata.partitions.values())


def test_killing_partition_leaders_mid_stream_loses_and_resurrects_nothing(
    cluster: list[kafka_node.RunningNode], tmp_path: Path, fault_report: dict[str, Any]
) -> None:
    bootstrap = ",".join(n.node.bootstrap for n in cluster)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = "broker-faults"
    created = admin.create_topics(
        [NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})]
    )
    created[topic].result(timeout=30)

    acked: dict[int, int] = {}  # event -> partition
    failed: list[int] = []

    def delivered(err: KafkaError | None, msg: Any) -> None:
        event = int(msg.value())
        if err is None:
            acked[event] = msg.partition()
        else:
            failed.append(event)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "message.timeout.ms": 120_000,
            "linger.ms": 5,
        }
    )

    # The sender may not run past `released`: each kill happens while it is still sending,
    # however long a broker restart takes on a loaded machine.
    released = EVENTS // 2
    gate = threading.Condition()

    def release(upto: int) -> None:
        nonlocal released
        with gate:
            released = upto
            gate.notify_all()

    def produce() -> None:
        for event in range(EVENTS):
            with gate:
                while event >= released:
                    gate.wait()
            while True:
                try:
                    producer.produce(
                        topic, key=str(event % 97), value=str(event), on_delivery=delivered
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            if event % 20 == 0:
                producer.poll(0)
                time.sleep(0.01)  # spread the stream (~20 s) over the kills
        producer.flush(180)

    sender = threading.Thread(target=produce)
    sender.start()
    nodes = {n.node.node_id: n for n in cluster}
    kills = 0
    # The leader of most partitions at a quarter of the stream, then (after it is back) another
    # at five eighths; the stream goes on against the other two while each is down.
    for kill_at, then_release in ((EVENTS // 4, EVENTS * 3 // 4), (EVENTS * 5 // 8, EVENTS)):
        while len(acked) < kill_at:
            assert sender.is_alive()
            time.sleep(0.05)
        victim = leaders(admin, topic).most_common(1)[0][0]
        os.kill(nodes[victim].pid, signal.SIGKILL)
        kills += 1
        time.sleep(3)  # the stream goes on against the other two
        nodes[victim] = kafka_node.restart_node(nodes[victim], tmp_path / "logs", NODES, 120)
        cluster[:] = list(nodes.values())
        release(then_release)
    sender.join(timeout=240)
    assert not sender.is_alive()

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "broker-faults-reader",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    read: list[tuple[int, int]] = []
    deadline = time.monotonic() + 120
    while len(read) < len(acked) and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 1.0):
            if msg.error() is None:
                read.append((msg.partition(), int(msg.value())))
    time.sleep(1)
    read += [
        (m.partition(), int(m.value())) for m in consumer.consume(1000, 2.0) if m.error() is None
    ]
    consumer.close()

    counts = Counter(event for _, event in read)
    lost = [e for e in acked if counts[e] == 0]
    duplicated = [e for e, n in counts.items() if n > 1]
    resurrected = [e for e in counts if e not in acked]
    out_of_order = sum(not in_order([e for q, e in read if q == p]) for p in range(PARTITIONS))
    figures = {"events": EVENTS, "broker_kills": kills, "lost": len(lost)}
    record(fault_report, figures | {"resurrected": len(resurrected) + len(duplicated)})
    assert failed == []
    assert (len(acked), lost, duplicated, resurrected, out_of_order) == (EVENTS, [], [], [], 0)
