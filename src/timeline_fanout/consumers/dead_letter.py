"""The dead-letter topic: bad messages leave the stream with their reason and provenance.

The original bytes are kept as the value so an operator can fix and re-publish them; headers say
why and where from. Sends are confirmed (flushed) before the batch that rejected them is
committed, so a message is never both skipped and unrecorded: a send the broker finally refused
is queued again by the next ``confirm``, which fails until every letter is acknowledged.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from timeline_fanout.consumers.positions import Rejected
from timeline_fanout.kafka_log import logged

# Messages up to the schema limit plus headroom; anything larger is truncated (and said so).
DLQ_MAX_VALUE = 900 * 1024


class DeadLetterError(RuntimeError):
    pass


class DeadLetters:
    def __init__(
        self, bootstrap: str, topic: str, group: str, extra: Mapping[str, Any] | None = None
    ) -> None:
        self._producer = Producer(
            logged(
                {
                    "bootstrap.servers": bootstrap,
                    "enable.idempotence": True,
                    "acks": "all",
                    **(extra or {}),
                }
            )
        )
        self._topic = topic
        self._group = group
        self._errors: list[str] = []
        self._refused: list[Rejected] = []  # sends to queue again (their delivery failed)
        self.sent = 0

    def send(self, rejected: Rejected) -> None:
        value = rejected.value or b""
        headers: dict[str, str | bytes | None] = {
            "fanout.dlq.reason": rejected.reason.encode("utf-8", "replace")[:1000],
            "fanout.dlq.topic": rejected.origin.topic.encode(),
            "fanout.dlq.partition": b"%d" % rejected.origin.partition,
            "fanout.dlq.offset": b"%d" % rejected.origin.offset,
            "fanout.dlq.group": self._group.encode(),
            "fanout.dlq.time": b"%d" % (time.time_ns() // 1_000_000),
        }
        if len(value) > DLQ_MAX_VALUE:
            headers["fanout.dlq.truncated_from"] = b"%d" % len(value)
            value = value[:DLQ_MAX_VALUE]

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                self._errors.append(str(err))
                self._refused.append(rejected)

        self._producer.produce(
            self._topic,
            value=value,
            key=rejected.origin.key,
            headers=headers,
            on_delivery=on_delivery,
        )
        self.sent += 1
        self._producer.poll(0)

    def confirm(self, timeout: float = 2.0) -> None:
        """Block until every send is acknowledged; raise if any was not. Short, because the
        consumer does not poll meanwhile: a slow broker is a transient failure, retried while
        the consumer keeps its place in the group."""
        refused, self._refused = self._refused, []
        for rejected in refused:
            self.send(rejected)
            self.sent -= 1  # the same letter, sent again
        remaining = self._producer.flush(timeout)
        errors, self._errors = self._errors, []
        if remaining or errors:
            raise DeadLetterError(f"dead-letter delivery failed: {remaining} pending, {errors[:3]}")
