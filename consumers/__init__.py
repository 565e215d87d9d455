"""Kafka consumers: the consume loop, dead letters and their limit, the graph applier."""

from consumers.dead_letter import DeadLetters
from consumers.dlq_limit import DlqLimit
from consumers.graph_apply import GraphApplier
from consumers.halts import (
    ConsumerHalted,
    DlqLimitExceeded,
    PermanentFailure,
    StuckWithoutAssignment,
)
from consumers.kafka_source import KafkaSource
from consumers.loop import ConsumeLoop, LoopStats, Stopped
from consumers.positions import Origin, Positioned, Rejected, decode_message, position

__all__ = [
    "ConsumeLoop",
    "ConsumerHalted",
    "DeadLetters",
    "DlqLimit",
    "DlqLimitExceeded",
    "GraphApplier",
    "KafkaSource",
    "LoopStats",
    "Origin",
    "PermanentFailure",
    "Positioned",
    "Rejected",
    "Stopped",
    "StuckWithoutAssignment",
    "decode_message",
    "position",
]
