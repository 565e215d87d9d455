"""How far the consumers are behind, as the broker sees it: each consumer group's committed
offsets against the topics' high watermarks.

Why from the broker and not from the consumers' own metrics (consumers/metrics.py): the
consumers run as separate processes (``fanout consume``), possibly several per group and on
other machines, and the API must not need to know where they are. The committed offsets are the
group's shared truth, and they move only when a batch is applied, so their rise over time is the
rate at which events are applied. This reader is stateless: a snapshot carries the committed
totals and the time it was taken, and a client that polls (the page at ``/``) derives rates from
two snapshots.

Approximate on the dev broker: Tansu reports as the high watermark the base offset of the last
record batch plus one, not the log end, so a topic whose last batch holds several records shows
up to that many records too few behind (lag is clamped at 0 for the same reason). On Apache
Kafka the high watermark is the log end and the figures are exact up to the commit interval.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, TopicPartition

from timeline_fanout.api.recent import Recent
from timeline_fanout.kafka_log import logged

# Answers about a leader this client does not know yet (or any more): asked again, not failed.
# (``KafkaError.retriable()`` is not set on the errors ``get_watermark_offsets`` raises.)
LEADER_UNKNOWN = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
)


@dataclass(frozen=True, slots=True)
class WatchedGroup:
    """A consumer to report on: its name on the page, its Kafka group and the topics it reads."""

    name: str
    group_id: str
    topics: tuple[str, ...]


class ConsumerLag:
    """Shared by every API thread of a process (one Kafka client per watched group, opened on
    first use, not one per thread); reads are serialised by a lock, and a snapshot is answered
    again for a second (api/recent.py: /v1/stats is public, and a fresh one asks the broker for
    every group's offsets), so a thread waiting for the lock gets the one just taken. Rates
    stay right: they divide by the snapshots' own ``at``."""

    def __init__(
        self,
        bootstrap: str,
        groups: Sequence[WatchedGroup],
        config: Mapping[str, Any],
        timeout_s: float,
    ) -> None:
        self._bootstrap = bootstrap
        self._groups = tuple(groups)
        self._config = dict(config)
        self._timeout = timeout_s
        self._lock = threading.Lock()
        self._clients: dict[str, Consumer] = {}
        self._last: Recent[dict[str, Any]] = Recent()

    def snapshot(self) -> dict[str, Any]:
        """``{"at": ms, "consumers": [...]}``; raises ``KafkaException`` when the broker does
        not answer within the timeout."""
        with self._lock:
            if (kept := self._last.get()) is not None:
                return kept
            consumers = [self._group(group) for group in self._groups]
            return self._last.put({"at": int(time.time() * 1000), "consumers": consumers})

    def close(self) -> None:
        """Idempotent: every API thread's backends call it when the app stops."""
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()

    def _client(self, group: WatchedGroup) -> Consumer:
        client = self._clients.get(group.group_id)
        if client is None:
            client = Consumer(
                logged(
                    {
                        **self._config,
                        "bootstrap.servers": self._bootstrap,
                        "group.id": group.group_id,
                        "enable.auto.commit": False,  # it never joins the group nor commits
                    }
                )
            )
            self._clients[group.group_id] = client
        return client

    def _group(self, group: WatchedGroup) -> dict[str, Any]:
        client = self._client(group)
        metadata = client.list_topics(timeout=self._timeout)
        partitions = [
            TopicPartition(topic, p)
            for topic in group.topics
            if topic in metadata.topics
            for p in sorted(metadata.topics[topic].partitions)
        ]
        committed = client.committed(partitions, timeout=self._timeout) if partitions else []
        topics: dict[str, dict[str, int]] = {
            topic: {"committed": 0, "end": 0, "lag": 0} for topic in group.topics
        }
        deadline = time.monotonic() + self._timeout
        for tp in committed:
            low, high = self._watermarks(client, TopicPartition(tp.topic, tp.partition), deadline)
            # No commit yet: the group would start from the beginning of what is kept.
            done = low if tp.offset == OFFSET_INVALID or tp.offset < 0 else tp.offset
            figures = topics[tp.topic]
            figures["committed"] += done
            figures["end"] += high
            figures["lag"] += max(high - done, 0)
        return {
            "consumer": group.name,
            "group": group.group_id,
            "lag": sum(t["lag"] for t in topics.values()),
            "committed": sum(t["committed"] for t in topics.values()),
            "topics": [{"topic": name, **figures} for name, figures in topics.items()],
        }

    @staticmethod
    def _watermarks(client: Consumer, tp: TopicPartition, deadline: float) -> tuple[int, int]:
        """The partition's low and high watermarks. An answer about the leader (one that moved,
        or that this client's metadata does not know yet, as just after a topic is created) is
        asked again until ``deadline``: librdkafka refreshes its metadata on such an error."""
        while True:
            try:
                low, high = client.get_watermark_offsets(
                    tp, timeout=max(deadline - time.monotonic(), 0.1), cached=False
                )
                return low, high
            except KafkaException as exc:
                if exc.args[0].code() not in LEADER_UNKNOWN or time.monotonic() >= deadline:
                    raise
            time.sleep(0.05)
