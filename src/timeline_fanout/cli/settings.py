"""Settings: environment variables (``FANOUT_*``) override the addresses recorded by
``fanout stack up`` (handed in by the CLI through `Settings.with_recorded`), which override the
defaults. docs/configuration.md is generated from the fields and their descriptions.

The settings know nothing of the local stack: they take its addresses as plain values, so the
product runs the same against servers the stack started and servers an operator runs.

A topic prefix other than the default isolates a run: unless set explicitly, its cache namespace,
consumer group and embedded edge-store file are derived from the prefix, so two runs under one
``FANOUT_HOME`` share only the servers. The default prefix keeps the plain names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from timeline_fanout.schemas import Topics

DEFAULT_TOPIC_PREFIX = "fanout"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FANOUT_", extra="ignore")

    home: Path = Field(
        Path(".fanout"),
        description="the local state directory (relative to the working directory): the "
        "embedded edge-store file, and the local stack's logs and recorded addresses",
    )

    kafka: str = Field(
        "127.0.0.1:9092",
        description="Kafka bootstrap servers (unset: those recorded by `fanout stack up`)",
    )
    memcached: str = Field(
        "127.0.0.1:11211",
        description="comma-separated host:port list (unset: those recorded by `fanout stack up`); "
        "the servers must keep CAS ids on (never `-C`)",
    )
    # URLs and client settings may carry credentials: kept out of reprs (and so out of logs).
    edge_store: str = Field(
        "",
        description="`sqlite:///PATH` or a `mongodb://` URL (credentials in the URL, never "
        "logged); empty: `sqlite:///$FANOUT_HOME/edges.db` (`edges-PREFIX.db` under another "
        "topic prefix)",
        repr=False,
    )
    mongo_following: Literal["collection", "index"] = Field(
        "collection",
        description="MongoDB: `collection`, a separate `following` collection; `index`, "
        "a reverse index on `followers`",
    )
    topic_prefix: str = Field(
        DEFAULT_TOPIC_PREFIX,
        description="topics are PREFIX.graph, .posts, .fanout-tasks, .dlq; another prefix than "
        "the default also gets its own cache namespace, consumer group and SQLite file unless "
        "those are set",
    )
    partitions: int = Field(
        6, ge=1, description="partitions per topic for `topics create` and `stack up`"
    )
    replication: int = Field(1, ge=1, description="replication factor for `topics create`")
    kafka_config: dict[str, Any] = Field(
        default_factory=dict,
        description="extra librdkafka settings as JSON (SASL/TLS), passed to every producer and "
        "consumer; never logged",
        repr=False,
    )
    group: str = Field(
        "fanout", description="consumer group prefix (GROUP.graph, GROUP.fanout, GROUP.replay-*)"
    )
    instance_id: str = Field(
        "",
        description="stable id of this consumer process (e.g. a pod name): Kafka static "
        "membership, so a restarted process takes its predecessor's partitions at once",
    )
    batch_size: int = Field(
        1000, ge=1, description="max messages per fan-out consumer batch (posts, tasks)"
    )
    # Bigger graph batches collapse more events onto the same lists and spread each batch's
    # round trips over more events (bench/graph/graph_ingest.py: ~1.3x the rate of 1000). A batch
    # takes only what is already fetched, so this adds no latency when traffic is light.
    graph_batch_size: int = Field(
        5000, ge=1, description="max messages per graph consumer batch (follows, unfollows)"
    )
    max_poll_interval_ms: int = Field(
        10000,
        ge=6000,  # librdkafka: at least session.timeout.ms, which is at least 6 s here
        description="librdkafka max.poll.interval.ms (rebalance timeout); the session timeout is "
        "min(45 s, max(6 s, this))",
    )
    # The dead-letter limit (consumers/dlq_limit.py): events that fail to apply, alone, are
    # poison up to these limits and a fault of ours beyond them (the consumer halts).
    dlq_max_consecutive: int = Field(
        10,
        ge=0,
        description="the dead-letter limit: halt (exit 3) after more events than this fail to "
        "apply in a row (0: no limit)",
    )
    dlq_max_ratio: float = Field(
        0.1,
        ge=0,
        le=1,
        description="halt (exit 3) when more than this share of the last FANOUT_DLQ_WINDOW "
        "applied events failed (1: no limit)",
    )
    dlq_window: int = Field(1000, ge=1, description="events the ratio is taken over")
    rebalance_stuck_s: float | None = Field(
        None,
        gt=0,
        description="`--until-idle` halts (exit 5) after this long without a partition "
        "assignment (unset: the largest of 60 s, 3 session timeouts and twice the longest "
        "rebalance, a session timeout plus max.poll.interval.ms)",
    )
    list_shard_bytes: int = Field(
        64 * 1024,
        ge=256,
        le=1000 * 1024,
        description="close a list shard once it passes this size (memcached's item limit is 1 MiB)",
    )
    list_dirty_ratio: float = Field(
        0.5, gt=0, le=1, description="compact when dead tokens exceed this share of tokens"
    )
    list_dirty_min: int = Field(64, ge=0, description="never compact below this many dead tokens")
    list_build_wait_s: float = Field(
        0.01,
        gt=0,
        le=1,
        description="a reader that finds a list another client is building reads its head again "
        "this often, 50 times at most, then answers from the edge store",
    )
    list_compact_write_prob: float = Field(
        0.01,
        ge=0,
        le=1,
        description="chance that a writer reads (and so compacts) a list it appended to",
    )
    cache_prefix: str = Field("tf", description="memcached key namespace")
    # Failover (memcache/trust.py, docs/design/cache-failover.md).
    cache_timeout_s: float = Field(
        1.0,
        gt=0,
        le=30,
        description="a memcached server that has not answered within this (connect or reply) "
        "is down for this process; no request waits on one longer",
    )
    cache_retry_s: float = Field(
        2.0, gt=0, le=300, description="a down memcached server is probed again after this"
    )
    ring_lease_s: float = Field(
        2.0,
        gt=0,
        le=60,
        description="the shared record of the memcached servers and their epochs is used this "
        "long after a read (renewed in the background at half of it); a consumer that could "
        "not write to a server holds its batch this long, and a ring change waits this long, "
        "plus twice the cache timeout and a second, between its steps. Recorded in the record "
        "by the first process to find none there; every process then uses the recorded one",
    )
    # A timeline is one memcached item: 5000 entries of at most ~145 bytes fit the default 1 MiB.
    timeline_max: int = Field(
        800, ge=1, le=5000, description="entries kept per home timeline (trimmed by compaction)"
    )
    cache_heal_s: int = Field(
        3600,
        ge=1,
        le=7 * 86400,
        description="every cached list and timeline expires within this (±10%; shards after twice "
        "this) and is rebuilt from the edge store: how long any divergence can last",
    )
    # Below ~10k followers one consumer delivers a post faster (~20 ms) than a round trip of
    # chunk tasks through Kafka takes (bench/fanout/fanout_rate.py); the schema caps a chunk at 10k.
    chunk_size: int = Field(
        10_000,
        ge=1,
        le=10_000,
        description="authors with more followers are fanned out in chunks of this size",
    )
    celebrity_threshold: int = Field(
        100_000,
        ge=0,
        description="authors with more followers are not fanned out; readers merge their posts",
    )
    # The staleness bound of the cached celebrity posts and celebrity set
    # (graph/timelines/celebrity_posts.py): each expires this long after the store read it was
    # built from.
    celebrity_cache_s: int = Field(
        5,
        ge=1,
        le=3600,
        description="the cached celebrity set and posts expire this long after the store read "
        "they were built from (a celebrity's post shows within this + 2 s)",
    )

    @classmethod
    def with_recorded(cls, recorded: Mapping[str, str]) -> Settings:
        """These settings, with *recorded* (e.g. the addresses ``fanout stack up`` wrote) filling
        every field the environment leaves unset: the environment always wins.

        Args:
            recorded: field names to values; names that are not fields are ignored.

        Returns:
            The settings of this process.

        Example:
            >>> Settings.with_recorded({"memcached": "127.0.0.1:11311"}).memcached_servers
            [('127.0.0.1', 11311)]
        """
        from_environment = cls()
        fill: dict[str, Any] = {
            name: value
            for name, value in recorded.items()
            if name in cls.model_fields and name not in from_environment.model_fields_set
        }
        return cls(**fill) if fill else from_environment

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
        return f"sqlite:///{self.home.resolve() / name}"


def environment(settings: Settings) -> dict[str, str]:
    """This process's environment plus what makes a ``fanout`` subprocess use exactly these
    settings (``kafka_config``, a dict, is not passed: set FANOUT_KAFKA_CONFIG yourself)."""
    env = dict(os.environ)
    for name, value in settings.model_dump().items():
        if value is not None and not isinstance(value, dict):
            env[f"FANOUT_{name.upper()}"] = str(value)
    return env
