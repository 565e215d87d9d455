"""Publishing events to Kafka: the app-facing publisher and topic administration."""

from timeline_fanout.producers.internal import InternalPublisher
from timeline_fanout.producers.publisher import (
    DeliveryFailure,
    DeliveryReport,
    EventPublisher,
    PublishError,
)
from timeline_fanout.producers.topic_admin import create_topics

__all__ = [
    "DeliveryFailure",
    "DeliveryReport",
    "EventPublisher",
    "InternalPublisher",
    "PublishError",
    "create_topics",
]
