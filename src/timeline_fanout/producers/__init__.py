"""Publishing events to Kafka: the app-facing publisher, the admission policies that say which
event types a publisher may send, and topic administration."""

from timeline_fanout.producers.admission import (
    APP_EVENTS,
    CONSUMER_TASKS,
    AdmissionPolicy,
    AdmitTypes,
)
from timeline_fanout.producers.internal import InternalPublisher
from timeline_fanout.producers.publisher import (
    DeliveryFailure,
    DeliveryReport,
    EventPublisher,
    PublishError,
)
from timeline_fanout.producers.topic_admin import create_topics

__all__ = [
    "APP_EVENTS",
    "CONSUMER_TASKS",
    "AdmissionPolicy",
    "AdmitTypes",
    "DeliveryFailure",
    "DeliveryReport",
    "EventPublisher",
    "InternalPublisher",
    "PublishError",
    "create_topics",
]
