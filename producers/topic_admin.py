"""Topic creation through the AdminClient; creating an existing topic is not an error."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]


def create_topics(
    bootstrap_servers: str,
    names: Iterable[str],
    partitions: int,
    replication: int = 1,
    extra_config: Mapping[str, Any] | None = None,
    timeout: float = 30.0,
) -> dict[str, str]:
    """Returns ``{topic: "created" | "exists"}``; any other failure raises."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, **(extra_config or {})})
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
    return outcome
