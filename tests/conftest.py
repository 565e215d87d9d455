"""Shared fixtures: one real local stack (a broker + 3 memcached) per test session.

The broker is Apache Kafka where Java is present and its jars are cached (``.ci/bootstrap``
fetches them), Tansu otherwise; ``FANOUT_BROKER`` decides explicitly (see
``devstack.broker_choice``), and pytest's header names it. Tests of behaviour only Apache Kafka has
are marked ``apache_kafka`` and skipped on Tansu; ``tansu_smoke`` marks the set CI also runs on
Tansu.

The stack is started by the project's own ``devstack.stack`` code under a private FANOUT_HOME with
free ports, so two test runs on one machine never collide. Each test gets its own topic prefix,
cache namespace and consumer group, so tests never see each other's data.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

_HOME = tempfile.mkdtemp(prefix="fanout-test-")
os.environ["FANOUT_HOME"] = _HOME  # before anything reads settings
# testcontainers without its Ryuk reaper: the reaper's image comes from a registry, and every
# container the tests start is removed by the `with` block that started it.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

import hypothesis  # noqa: E402

# Hypothesis fails an example slower than 200 ms by default: a wall-clock bound, which a loaded
# machine breaks at random. Properties are asserted here; timing lives in bench/.
hypothesis.settings.register_profile("fanout", deadline=None)
hypothesis.settings.load_profile("fanout")

from tests import leftover_servers  # noqa: E402
from tests.held_ring import own_trust  # noqa: E402
from timeline_fanout.cli.settings import Settings, environment  # noqa: E402
from timeline_fanout.graph import ListSettings, ShardedLists  # noqa: E402
from timeline_fanout.graph.lists.sharded import ShardedLayout  # noqa: E402
from timeline_fanout.graph.lists.token_lists import TokenLists  # noqa: E402
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore  # noqa: E402
from timeline_fanout.memcache import MemcacheCluster  # noqa: E402
from timeline_fanout.producers import create_topics  # noqa: E402
from timeline_fanout.schemas import Topics  # noqa: E402
from timeline_fanout_devstack import stack  # noqa: E402
from timeline_fanout_devstack.broker_choice import chosen_broker  # noqa: E402
from timeline_fanout_devstack.kafka_jars import kafka_version  # noqa: E402
from timeline_fanout_devstack.ports import refusing_address  # noqa: E402

if TYPE_CHECKING:
    from tests.mongo_servers import EdgeStoreChoice

pytest_plugins = ["tests.fault.report", "tests.mongo_servers"]

# Decided once; `fanout stack up` run by tests in their own homes starts the same broker.
_EXPLICIT = os.environ.get("FANOUT_BROKER")
BROKER = chosen_broker(fetch_allowed=False)
os.environ["FANOUT_BROKER"] = BROKER


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "apache_kafka: checks behaviour of Apache Kafka that Tansu lacks (skipped there)"
    )
    config.addinivalue_line("markers", "tansu_smoke: also run against Tansu in CI")
    if not hasattr(config, "workerinput"):  # the run's controller: before any worker starts
        leftover_servers.mark_run()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """A run that leaves a server of its own running fails, naming the test that started it."""
    if hasattr(session.config, "workerinput"):
        return
    left = leftover_servers.survivors_after(os.environ[leftover_servers.RUN_MARK], grace_s=10)
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = "\n".join(f"  {s}" for s in left)
    if reporter is not None:
        reporter.write_line(f"\nservers of this run still running after it:\n{lines}", red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if BROKER == "kafka":
        return
    skip = pytest.mark.skip(reason=f"needs Apache Kafka; this run's broker is {BROKER}")
    for item in items:
        if item.get_closest_marker("apache_kafka"):
            item.add_marker(skip)


@pytest.fixture
def restored_gc() -> Iterator[None]:
    """For tests that tune the collector as a consumer process does (fanout.gc_policy): the
    rest of the session runs with the default policy again."""
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.fixture(scope="session")
def local_stack() -> Iterator[stack.StackState]:
    state = stack.stack_up(Topics("boot"), partitions=1, broker=BROKER)
    yield state
    stack.stack_down(purge=True)


@pytest.fixture
def cache(local_stack: stack.StackState) -> Iterator[MemcacheCluster]:
    servers = Settings(memcached=local_stack.memcached).memcached_servers
    cluster = MemcacheCluster(servers, trust=own_trust(servers))
    cluster.flush_all()
    yield cluster
    cluster.close()


@dataclass(frozen=True)
class Refused:
    """An address nothing answers at: ``pair`` for clients taking (host, port), ``str()`` else."""

    pair: tuple[str, int]

    def __str__(self) -> str:
        return f"{self.pair[0]}:{self.pair[1]}"


@pytest.fixture
def refused() -> Iterator[Refused]:
    """A loopback address that refuses connections for the whole test (held, so no other
    test's server can take its port and answer)."""
    with refusing_address() as pair:
        yield Refused(pair)


@pytest.fixture
def unique() -> str:
    return "t" + uuid.uuid4().hex[:10]


@pytest.fixture
def settings(
    local_stack: stack.StackState, unique: str, edge_store_choice: EdgeStoreChoice
) -> Settings:
    """Settings for one test: real servers, private names, tiny list shards; the edge store is
    a private SQLite file unless the test is marked ``edge_stores`` (tests/mongo_servers.py)."""
    topics = Topics(unique)
    create_topics(local_stack.kafka, topics.all(), partitions=6)
    return Settings(
        kafka=local_stack.kafka,
        memcached=local_stack.memcached,
        edge_store=edge_store_choice.url,
        mongo_following=edge_store_choice.following,
        topic_prefix=unique,
        cache_prefix=unique,
        group=unique,
        list_shard_bytes=256,
        batch_size=500,
        graph_batch_size=500,
    )


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqliteEdgeStore]:
    store = SqliteEdgeStore(tmp_path / "edges.db")
    yield store
    store.close()


@pytest.fixture
def lists(cache: MemcacheCluster, sqlite_store: SqliteEdgeStore, unique: str) -> ShardedLists:
    return TokenLists(
        ShardedLayout,
        cache,
        sqlite_store,
        ListSettings(shard_bytes=128, dirty_min=4, namespace=unique, compact_write_prob=0),
    )


def pytest_report_header() -> list[str]:
    from tests.mongo_servers import report_header

    broker = f"Apache Kafka {kafka_version()} (KRaft, one node)" if BROKER == "kafka" else "Tansu"
    return [
        f"broker: {broker}, "
        + (f"FANOUT_BROKER={_EXPLICIT}" if _EXPLICIT else "the default (Java and the jars found)"),
        report_header(),
    ]


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that makes a `fanout` subprocess use exactly these settings."""
    return environment(settings)


def run_cli(
    settings: Settings,
    *args: str,
    timeout: float = 120,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """``env`` adds variables to the settings' environment."""
    return subprocess.run(
        [sys.executable, "-m", "timeline_fanout", *args],
        env=settings_env(settings) | (env or {}),
        input=stdin,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
