"""Kafka consumers: the consume loop, dead letters and their limit, the graph applier."""

from timeline_fanout.consumers.dead_letter import DeadLetters
from timeline_fanout.consumers.dlq_limit import DlqLimit
from timeline_fanout.consumers.graph_apply import GraphApplier
from timeline_fanout.consumers.halts import (
    ConsumerHalted,
    DlqLimitExceeded,
    PermanentFailure,
    StuckWithoutAssignment,
)
from timeline_fanout.consumers.kafka_source import KafkaSource
from timeline_fanout.consumers.loop import ConsumeLoop, LoopStats, Stopped
from timeline_fanout.consumers.positions import (
    Origin,
    Positioned,
    Rejected,
    decode_message,
    position,
)

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
