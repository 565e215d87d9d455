"""``EventPublisher``: the library apps import to publish graph and post events.

Validation happens before anything is queued, so a bad event is an exception at the call site and
never reaches the topic. Apps publish only app event types (follow, unfollow, post,
post_deleted, user_removed) unless given another admission policy (producers/admission.py): an
internal type (a ``fanout_task``) is refused, and the consumers publish theirs through
``InternalPublisher`` (producers/internal.py). Delivery is
asynchronous; failures come back from ``flush()`` as a typed report instead of vanishing in a
callback.

Partitions are chosen as Kafka's Java client (and kafkajs's default) chooses them: murmur2 of
the key, positive, modulo the partition count (librdkafka's ``murmur2_random``; its own default,
CRC32, disagrees on most keys). A followee's events from apps in several languages therefore
share one partition, which is what keeps them in order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from timeline_fanout.kafka_log import logged
from timeline_fanout.producers.admission import APP_EVENTS, AdmissionPolicy
from timeline_fanout.schemas import AnyEvent, Topics, encode_event, partition_key, validate_event

JAVA_COMPATIBLE_PARTITIONER = "murmur2_random"  # random only for a null key, which we never send


@dataclass(frozen=True, slots=True)
class DeliveryFailure:
    tag: object
    event_id: str
    error: str


@dataclass(slots=True)
class DeliveryReport:
    delivered: int = 0
    failed: list[DeliveryFailure] = field(default_factory=list)
    undelivered: int = 0  # still queued when flush() gave up waiting

    @property
    def ok(self) -> bool:
        return not self.failed and self.undelivered == 0


class PublishError(Exception):
    def __init__(self, report: DeliveryReport) -> None:
        self.report = report
        first = report.failed[0].error if report.failed else "flush timed out"
        super().__init__(
            f"{len(report.failed)} events failed, {report.undelivered} undelivered: {first}"
        )


class EventPublisher:
    """Idempotent producer: retries inside librdkafka never duplicate or reorder a partition.

    Args:
        bootstrap_servers: Kafka's bootstrap list, ``host:port[,host:port...]``.
        topics: The topic names events are published under.
        extra_config: librdkafka settings added last (SASL, TLS; ``FANOUT_KAFKA_CONFIG``).
        admission: Which event types ``publish`` accepts; ``APP_EVENTS`` refuses the
            internal ``fanout_task``.

    Example:
        >>> with EventPublisher("127.0.0.1:9092", Topics()) as publisher:  # doctest: +SKIP
        ...     publisher.publish({"type": "follow", "follower": "ann", "followee": "bob"})

        Leaving the ``with`` block flushes, and raises ``PublishError`` if any event was not
        acknowledged.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topics: Topics,
        extra_config: Mapping[str, Any] | None = None,
        *,
        admission: AdmissionPolicy = APP_EVENTS,
    ) -> None:
        config: dict[str, Any] = {
            "bootstrap.servers": bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": "lz4",
            "partitioner": JAVA_COMPATIBLE_PARTITIONER,
        }
        config.update(extra_config or {})
        self._producer = Producer(logged(config))
        self._topics = topics
        self._admission = admission
        self._report = DeliveryReport()
        self._in_flight = 0

    def publish(self, event: AnyEvent | Mapping[str, Any], tag: object = None) -> AnyEvent:
        """Validate, add the envelope, and queue: delivery is reported by ``flush``.

        Args:
            event: An event model, or a mapping ``validate_event`` takes.
            tag: Anything; it comes back in the ``DeliveryFailure`` of this event, if it fails.

        Returns:
            The event as queued, with its envelope (``event_id``, ``ts``, ``v``).

        Raises:
            EventDecodeError: The event is invalid, or of a type this publisher's admission
                policy refuses. Nothing is queued.
        """
        parsed = event if not isinstance(event, Mapping) else validate_event(dict(event))
        parsed = self._admission.admit(parsed)
        full = parsed.with_envelope()
        assert isinstance(full, type(parsed))
        event_id = full.event_id or ""

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            self._in_flight -= 1
            if err is None:
                self._report.delivered += 1
            else:
                self._report.failed.append(DeliveryFailure(tag, event_id, str(err)))

        value = encode_event(full)
        key = partition_key(full).encode()
        while True:
            try:
                self._producer.produce(
                    self._topics.for_event(full), value=value, key=key, on_delivery=on_delivery
                )
                break
            except BufferError:  # local queue full: wait for deliveries, then queue again
                self._producer.poll(0.1)
        self._in_flight += 1
        self._producer.poll(0)
        return full

    def check_brokers(self, timeout: float) -> int:
        """The number of brokers the cluster reports, read from a metadata request: a
        readiness probe. Raises ``KafkaException`` when no broker answers within ``timeout``."""
        return len(self._producer.list_topics(timeout=timeout).brokers)

    def flush(self, timeout: float = 30.0) -> DeliveryReport:
        """Wait for every queued event and return what happened since the last flush."""
        self._producer.flush(timeout)
        report, self._report = self._report, DeliveryReport()
        report.undelivered = self._in_flight
        return report

    def __enter__(self) -> EventPublisher:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        report = self.flush()
        if exc_type is None and not report.ok:
            raise PublishError(report)
