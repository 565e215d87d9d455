"""Publishing events to Kafka: the app-facing publisher and topic administration."""

from producers.internal import InternalPublisher
from producers.publisher import DeliveryFailure, DeliveryReport, EventPublisher, PublishError
from producers.topic_admin import create_topics

__all__ = [
    "DeliveryFailure",
    "DeliveryReport",
    "EventPublisher",
    "InternalPublisher",
    "PublishError",
    "create_topics",
]
