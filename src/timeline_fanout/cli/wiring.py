"""Builds the components from settings; the only place that knows how they fit together."""

from __future__ import annotations

import threading

from confluent_kafka import TopicPartition

from timeline_fanout.cli.settings import Settings
from timeline_fanout.consumers import ConsumeLoop, DeadLetters, GraphApplier, KafkaSource
from timeline_fanout.consumers.dlq_limit import DlqLimit
from timeline_fanout.consumers.fanout_apply import FanoutApplier
from timeline_fanout.consumers.loop import Applier
from timeline_fanout.consumers.metrics import ConsumerMetrics
from timeline_fanout.graph import (
    EdgeStore,
    ListSettings,
    ShardedLists,
    open_edge_store,
)
from timeline_fanout.graph.lists.capped import CappedLayout, CappedLists
from timeline_fanout.graph.lists.sharded import ShardedLayout
from timeline_fanout.graph.lists.shared_reads import SharedReads
from timeline_fanout.graph.lists.token_lists import ListStats, TokenLists
from timeline_fanout.graph.model.edges import Snapshot
from timeline_fanout.graph.model.keys import KeySpace, ListRef
from timeline_fanout.graph.stores.ring_records import open_ring_source
from timeline_fanout.graph.timelines.author_pages import AuthorPages
from timeline_fanout.graph.timelines.celebrity_posts import CelebrityPosts
from timeline_fanout.graph.timelines.fetch import ReadMemory
from timeline_fanout.graph.timelines.known_texts import KnownTexts
from timeline_fanout.graph.timelines.page_memo import PageMemo
from timeline_fanout.graph.timelines.post_bodies import PostBodies
from timeline_fanout.graph.timelines.reader import TimelineReader, TimelineSource
from timeline_fanout.graph.timelines.warm_reads import WarmReads
from timeline_fanout.memcache import Cache, MemcacheCluster
from timeline_fanout.memcache.async_cluster import AsyncMemcache
from timeline_fanout.memcache.ring import RingRecord, RingSource, RingView
from timeline_fanout.memcache.trust import ServerTrust, TrustSettings
from timeline_fanout.producers import EventPublisher, InternalPublisher


def publisher(settings: Settings) -> EventPublisher:
    return EventPublisher(settings.kafka, settings.topics, settings.kafka_config)


def edge_store(settings: Settings) -> EdgeStore:
    return open_edge_store(settings.edge_store_url, settings.mongo_following)


def _list_settings(settings: Settings, cap: int | None = None) -> ListSettings:
    return ListSettings(
        shard_bytes=settings.list_shard_bytes,
        dirty_ratio=settings.list_dirty_ratio,
        dirty_min=settings.list_dirty_min,
        compact_write_prob=settings.list_compact_write_prob,
        namespace=settings.cache_prefix,
        heal_s=settings.cache_heal_s,
        max_members=cap,
        build_wait_s=settings.list_build_wait_s,
    )


def trust_settings(settings: Settings) -> TrustSettings:
    return TrustSettings(settings.cache_timeout_s, settings.cache_retry_s)


def ring_source(settings: Settings) -> RingSource:
    """The shared place of the ring record: the edge store (memcache/ring.py)."""
    return open_ring_source(settings.edge_store_url)


def server_trust(settings: Settings) -> ServerTrust:
    """Which servers this process may use (memcache/trust.py): one per process, shared by its
    clients, so that a server found down by one is gone around by all, and a ring record
    read by one is used by all (memcache/ring.py: the configured servers until one is
    recorded)."""
    servers = [f"{host}:{port}" for host, port in settings.memcached_servers]
    view = RingView(
        RingRecord.of(servers),
        ring_source(settings),
        settings.ring_lease_s,
        families=KeySpace.families,
    )
    view.keep_renewed()
    return ServerTrust(servers, trust_settings(settings), ring=view)


def cache_cluster(settings: Settings, trust: ServerTrust | None = None) -> MemcacheCluster:
    """A blocking client of the servers (its own ``ServerTrust`` unless one is given)."""
    return MemcacheCluster(settings.memcached_servers, trust=trust or server_trust(settings))


StoreReads = SharedReads[ListRef, Snapshot]


def list_store(
    settings: Settings,
    store: EdgeStore,
    cache: Cache | None = None,
    shared: StoreReads | None = None,
) -> ShardedLists:
    """Follower and following lists (on a cluster of their own unless ``cache`` is given;
    ``shared``: store reads shared with the process's other threads)."""
    cache = cache or cache_cluster(settings)
    return TokenLists(ShardedLayout, cache, store, _list_settings(settings), shared=shared)


def timeline_store(
    settings: Settings, store: EdgeStore, cache: Cache, shared: StoreReads | None = None
) -> CappedLists:
    source = TimelineSource(store, settings.timeline_max)
    list_settings = _list_settings(settings, cap=settings.timeline_max)
    return TokenLists(CappedLayout, cache, source, list_settings, shared=shared)


def celebrity_posts(settings: Settings, store: EdgeStore, timelines: CappedLists) -> CelebrityPosts:
    return CelebrityPosts(
        timelines.cache,
        store,
        timelines.keys,
        settings.timeline_max,
        settings.celebrity_cache_s,
        timelines.context.fresh,
    )


def timeline_reader(
    settings: Settings,
    store: EdgeStore,
    memory: ReadMemory | None = None,
    cache: Cache | None = None,
    shared: StoreReads | None = None,
    known: KnownTexts | None = None,
) -> TimelineReader:
    """``memory``, ``shared`` and ``known``: shared by the readers of one process's threads
    (graph/timelines/fetch.py, graph/lists/shared_reads.py, graph/timelines/known_texts.py)."""
    follow_lists = list_store(settings, store, cache, shared)
    timelines = timeline_store(settings, store, follow_lists.cache, shared)
    celebrities = celebrity_posts(settings, store, timelines)
    return TimelineReader(
        store, follow_lists, timelines, settings.timeline_max, celebrities, memory, known
    )


def warm_reads(
    settings: Settings,
    trust: ServerTrust,
    memo_bytes: int = 0,
    plans: TimelineReader | None = None,
) -> WarmReads:
    """The event loop's timeline reads (graph/timelines/warm_reads.py), sharing ``trust`` with
    the process's blocking readers (the loop never reads the ring record: it uses the lease a
    blocking client took, memcache/ring.py), running the plans of ``plans`` (or of the reader
    a request thread lends later); ``memo_bytes`` of rendered pages
    (graph/timelines/page_memo.py)."""
    cache = AsyncMemcache(settings.memcached_servers, trust=trust)
    return WarmReads(cache, PageMemo(memo_bytes) if memo_bytes else None, plans)


def group_id(settings: Settings, consumer: str) -> str:
    """The Kafka consumer group of ``fanout consume CONSUMER`` (and of its replays)."""
    return f"{settings.group}.{consumer}"


def _loop(
    settings: Settings,
    name: str,
    topics: list[str],
    applier: Applier,
    stop: threading.Event,
    batch_size: int,
    assignment: list[TopicPartition] | None = None,
) -> ConsumeLoop:
    group = group_id(settings, name)
    source = KafkaSource(
        settings.kafka,
        group,
        topics,
        max_poll_interval_ms=settings.max_poll_interval_ms,
        extra=settings.kafka_config,
        assignment=assignment,
        instance_id=f"{settings.instance_id}.{name}" if settings.instance_id else None,
    )
    dead_letters = DeadLetters(settings.kafka, settings.topics.dlq, group, settings.kafka_config)
    return ConsumeLoop(
        source,
        applier,
        dead_letters,
        stop,
        batch_size=batch_size,
        dlq_limit=dlq_limit(settings),
        topic_types=settings.topics.accepted(),
        stuck_after=settings.rebalance_stuck_s,
    )


def dlq_limit(settings: Settings) -> DlqLimit:
    return DlqLimit(
        max_consecutive=settings.dlq_max_consecutive or None,
        max_ratio=settings.dlq_max_ratio,
        window=settings.dlq_window,
    )


def graph_applier(settings: Settings) -> GraphApplier:
    store = edge_store(settings)
    return GraphApplier(store, list_store(settings, store))


def graph_loop(
    settings: Settings, stop: threading.Event, replay: list[TopicPartition] | None = None
) -> ConsumeLoop:
    applier = graph_applier(settings)
    name = "graph" if replay is None else "replay-graph"
    topics = [settings.topics.graph]
    return _loop(settings, name, topics, applier, stop, settings.graph_batch_size, replay)


def fanout_applier(settings: Settings) -> FanoutApplier:
    store = edge_store(settings)
    follow_lists = list_store(settings, store)
    timelines = timeline_store(settings, store, follow_lists.cache)
    heal_s = timelines.settings.heal_s
    # One fan-out applier per process: its bodies' known texts are the process's.
    bodies = PostBodies(timelines.cache, store, timelines.keys, heal_s)
    return FanoutApplier(
        store,
        follow_lists,
        timelines,
        # Chunk tasks are internal events: apps' publishers refuse them.
        InternalPublisher(settings.kafka, settings.topics, settings.kafka_config),
        settings.chunk_size,
        settings.celebrity_threshold,
        celebrity_posts(settings, store, timelines),
        bodies,
        AuthorPages(timelines.cache, store, timelines.keys, bodies, heal_s),
    )


def fanout_loop(
    settings: Settings, stop: threading.Event, replay: list[TopicPartition] | None = None
) -> ConsumeLoop:
    applier = fanout_applier(settings)
    size = settings.batch_size
    if replay is not None:  # chunk tasks are re-published from the replayed posts
        return _loop(
            settings, "replay-fanout", [settings.topics.posts], applier, stop, size, replay
        )
    topics = [settings.topics.posts, settings.topics.fanout_tasks]
    return _loop(settings, "fanout", topics, applier, stop, size)


def serve_metrics(loop: ConsumeLoop, consumer: str, port: int) -> int:
    """Expose the loop's metrics on ``port`` (Prometheus text format at /metrics; 0: a free
    port); returns the port bound."""
    applier = loop.applier
    lists: list[ListStats] = []
    fanout_stats = None
    if isinstance(applier, GraphApplier):
        lists = [applier.lists.stats]
    elif isinstance(applier, FanoutApplier):
        lists = [applier.follow_lists.stats, applier.timelines.stats]
        fanout_stats = applier.stats
    metrics = ConsumerMetrics(consumer, loop.source, lists, fanout_stats, loop_stats=loop.stats)
    loop.observers.append(metrics)
    return metrics.serve(port)
