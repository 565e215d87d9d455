"""Builds the components from settings; the only place that knows how they fit together."""

from __future__ import annotations

import threading

from consumers import ConsumeLoop, DeadLetters, GraphApplier, KafkaSource
from fanout.settings import Settings
from graph import EdgeStore, ListSettings, ListStore, MemcacheCluster, open_edge_store
from producers import EventPublisher


def publisher(settings: Settings) -> EventPublisher:
    return EventPublisher(settings.kafka, settings.topics, settings.kafka_config)


def edge_store(settings: Settings) -> EdgeStore:
    return open_edge_store(settings.edge_store_url, settings.mongo_following)


def list_store(settings: Settings, store: EdgeStore) -> ListStore:
    return ListStore(
        MemcacheCluster(settings.memcached_servers),
        store,
        ListSettings(
            shard_bytes=settings.list_shard_bytes,
            dirty_ratio=settings.list_dirty_ratio,
            dirty_min=settings.list_dirty_min,
            compact_write_prob=settings.list_compact_write_prob,
            namespace=settings.cache_prefix,
        ),
    )


def graph_loop(settings: Settings, stop: threading.Event) -> ConsumeLoop:
    store = edge_store(settings)
    group = f"{settings.group}.graph"
    return ConsumeLoop(
        source=KafkaSource(
            settings.kafka,
            group,
            [settings.topics.graph],
            max_poll_interval_ms=settings.max_poll_interval_ms,
            extra=settings.kafka_config,
        ),
        applier=GraphApplier(store, list_store(settings, store)),
        dead_letters=DeadLetters(settings.kafka, settings.topics.dlq, group, settings.kafka_config),
        stop=stop,
        batch_size=settings.batch_size,
    )
