"""Settings: environment variables (``FANOUT_*``) override the addresses recorded by
``fanout stack up``, which override the defaults. Every field is listed in the README table.

A topic prefix other than the default isolates a run: unless set explicitly, its cache namespace,
consumer group and embedded edge-store file are derived from the prefix, so two runs under one
``FANOUT_HOME`` share only the servers. The default prefix keeps the historic names.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator
from pydantic_settings import (
    BaseSettings,
    JsonConfigSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from schemas import Topics


def fanout_home() -> Path:
    """Where the local stack records its state; one per checkout unless FANOUT_HOME says."""
    return Path(os.environ.get("FANOUT_HOME", ".fanout")).resolve()


DEFAULT_TOPIC_PREFIX = "fanout"


def stack_file() -> Path:
    return fanout_home() / "stack.json"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FANOUT_", extra="ignore")

    kafka: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers")
    memcached: str = Field("127.0.0.1:11211", description="comma-separated host:port list")
    # URLs and client settings may carry credentials: kept out of reprs (and so out of logs).
    edge_store: str = Field("", description="sqlite:///PATH or mongodb:// URL", repr=False)
    mongo_following: Literal["collection", "index"] = Field(
        "collection", description="MongoDB: separate `following` collection or a reverse index"
    )
    topic_prefix: str = Field(
        DEFAULT_TOPIC_PREFIX, description="topics are PREFIX.graph, .posts, .dlq"
    )
    partitions: int = Field(6, ge=1, description="partitions per topic for `topics create`")
    replication: int = Field(1, ge=1, description="replication factor for `topics create`")
    kafka_config: dict[str, Any] = Field(
        default_factory=dict,
        description="extra librdkafka settings as JSON (SASL/TLS); never logged",
        repr=False,
    )
    group: str = Field("fanout", description="consumer group prefix (PREFIX.graph, ...)")
    instance_id: str = Field(
        "", description="stable id of this consumer process: Kafka static group membership"
    )
    batch_size: int = Field(
        1000, ge=1, description="max messages per fan-out consumer batch (posts, tasks)"
    )
    # Bigger graph batches collapse more events onto the same lists and spread each batch's
    # round trips over more events (bench/graph_ingest.py: ~1.3x the rate of 1000). A batch
    # takes only what is already fetched, so this adds no latency when traffic is light.
    graph_batch_size: int = Field(
        5000, ge=1, description="max messages per graph consumer batch (follows, unfollows)"
    )
    max_poll_interval_ms: int = Field(
        10000,
        ge=6000,  # librdkafka: at least session.timeout.ms, which is at least 6 s here
        description="librdkafka max.poll.interval.ms (rebalance timeout)",
    )
    # The dead-letter limit (consumers/dlq_limit.py): events that fail to apply, alone, are
    # poison up to these limits and a fault of ours beyond them (the consumer halts).
    dlq_max_consecutive: int = Field(
        10, ge=0, description="halt after more failed events in a row than this (0: no limit)"
    )
    dlq_max_ratio: float = Field(
        0.1, ge=0, le=1, description="halt when more than this share of the window failed"
    )
    dlq_window: int = Field(1000, ge=1, description="events the ratio is taken over")
    rebalance_stuck_s: float | None = Field(
        None,
        gt=0,
        description="--until-idle halts after this long without an assignment "
        "(default: max(60, 3 session timeouts))",
    )
    list_shard_bytes: int = Field(
        64 * 1024, ge=256, le=1000 * 1024, description="roll a list shard over after this size"
    )
    list_dirty_ratio: float = Field(
        0.5, gt=0, le=1, description="compact when dead tokens exceed this share of tokens"
    )
    list_dirty_min: int = Field(64, ge=0, description="never compact below this many dead tokens")
    list_compact_write_prob: float = Field(
        0.01, ge=0, le=1, description="chance a writer compacts a list it appended to"
    )
    cache_prefix: str = Field("tf", description="memcached key namespace")
    # A timeline is one memcached item: 5000 entries of at most ~145 bytes fit the default 1 MiB.
    timeline_max: int = Field(800, ge=1, le=5000, description="entries kept per home timeline")
    cache_heal_s: int = Field(
        3600,
        ge=1,
        le=7 * 86400,
        description="every cached list expires within this (±10%) and is rebuilt from the store",
    )
    # Below ~10k followers one consumer delivers a post faster (~20 ms) than a round trip of
    # chunk tasks through Kafka takes (bench/fanout_rate.py); the schema caps a chunk at 10k.
    chunk_size: int = Field(10_000, ge=1, le=10_000, description="followers per fan-out task chunk")
    celebrity_threshold: int = Field(
        100_000, ge=0, description="authors with more followers are merged at read time"
    )
    # The staleness bound of the cached celebrity posts and celebrity set
    # (graph/timelines/celebrity_posts.py): each expires this long after the store read it was
    # built from.
    celebrity_cache_s: int = Field(
        5, ge=1, le=3600, description="cached celebrity posts and set expire after this"
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        recorded = JsonConfigSettingsSource(settings_cls, json_file=stack_file())
        return (init_settings, env_settings, recorded)

    @model_validator(mode="after")
    def _isolate_by_topic_prefix(self) -> Settings:
        prefix = self.topic_prefix
        if prefix != DEFAULT_TOPIC_PREFIX:
            if "cache_prefix" not in self.model_fields_set:
                self.cache_prefix = f"tf.{prefix}"
            if "group" not in self.model_fields_set:
                self.group = prefix
        return self

    @property
    def topics(self) -> Topics:
        return Topics(self.topic_prefix)

    @property
    def memcached_servers(self) -> list[tuple[str, int]]:
        servers = []
        for spec in self.memcached.split(","):
            host, _, port = spec.strip().rpartition(":")
            servers.append((host or "127.0.0.1", int(port)))
        return servers

    @property
    def edge_store_url(self) -> str:
        if self.edge_store:
            return self.edge_store
        isolated = self.topic_prefix != DEFAULT_TOPIC_PREFIX
        name = f"edges-{self.topic_prefix}.db" if isolated else "edges.db"
        return f"sqlite:///{fanout_home() / name}"


def environment(settings: Settings) -> dict[str, str]:
    """This process's environment plus what makes a ``fanout`` subprocess use exactly these
    settings (``kafka_config``, a dict, is not passed: set FANOUT_KAFKA_CONFIG yourself)."""
    env = dict(os.environ)
    for name, value in settings.model_dump().items():
        if value is not None and not isinstance(value, dict):
            env[f"FANOUT_{name.upper()}"] = str(value)
    return env
