"""Topic creation through the AdminClient; creating an existing topic is not an error."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    NewTopic,
    OffsetSpec,
)

from timeline_fanout.kafka_log import logged


def create_topics(
    bootstrap_servers: str,
    names: Iterable[str],
    partitions: int,
    replication: int = 1,
    extra_config: Mapping[str, Any] | None = None,
    timeout: float = 30.0,
) -> dict[str, str]:
    """Returns ``{topic: "created" | "exists"}`` once the leader of every partition serves it;
    any other failure raises. (Apache Kafka acknowledges a creation before its brokers serve the
    new partitions: a client asking at once is told NOT_LEADER_FOR_PARTITION.)"""
    admin = AdminClient(logged({"bootstrap.servers": bootstrap_servers, **(extra_config or {})}))
    futures = admin.create_topics(
        [NewTopic(t, num_partitions=partitions, replication_factor=replication) for t in names],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    outcome: dict[str, str] = {}
    for name, future in futures.items():
        try:
            future.result(timeout)
            outcome[name] = "created"
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
            outcome[name] = "exists"
    _await_leaders(admin, list(outcome), time.monotonic() + timeout)
    return outcome


def _await_leaders(admin: AdminClient, names: list[str], deadline: float) -> None:
    """Until the leader of every partition answers ListOffsets for it."""
    pending: list[TopicPartition] = []
    metadata = admin.list_topics(timeout=max(deadline - time.monotonic(), 0.1))
    for name in names:
        topic = metadata.topics.get(name)
        count = len(topic.partitions) if topic is not None and topic.error is None else 0
        pending += [TopicPartition(name, p) for p in range(count)]
    while pending:
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        futures = admin.list_offsets({tp: latest for tp in pending}, request_timeout=5)
        failed = []
        for tp, future in futures.items():
            try:
                future.result()
            except KafkaException:
                failed.append(tp)
        pending = failed
        if pending and time.monotonic() > deadline:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"not served: {pending[:3]}"))
        if pending:
            time.sleep(0.05)
