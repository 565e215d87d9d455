"""The consume loop's reading of an exception: the store and cache's classification
(graph/failures.py) plus the Kafka-side steps of a batch.

Publishing chunk tasks, confirming dead letters and a retriable commit error all concern Kafka
being slow or away for a moment: transient. The batch is retried whole; nothing is committed
meanwhile.
"""

from __future__ import annotations

from timeline_fanout.consumers.dead_letter import DeadLetterError
from timeline_fanout.consumers.kafka_source import CommitRetriable
from timeline_fanout.graph.failures import Failure
from timeline_fanout.graph.failures import classify as classify_store
from timeline_fanout.producers import PublishError

__all__ = ["Failure", "classify"]


def classify(exc: BaseException) -> Failure:
    if isinstance(exc, DeadLetterError | PublishError | CommitRetriable):
        return Failure.TRANSIENT
    return classify_store(exc)
