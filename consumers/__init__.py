"""Kafka consumers: the consume loop, dead letters, and the graph applier."""

from consumers.dead_letter import DeadLetters
from consumers.graph_apply import GraphApplier
from consumers.kafka_source import KafkaSource
from consumers.loop import ConsumeLoop, LoopStats, Stopped
from consumers.positions import Origin, Positioned, Rejected, decode_message, position

__all__ = [
    "ConsumeLoop",
    "DeadLetters",
    "GraphApplier",
    "KafkaSource",
    "LoopStats",
    "Origin",
    "Positioned",
    "Rejected",
    "Stopped",
    "decode_message",
    "position",
]
