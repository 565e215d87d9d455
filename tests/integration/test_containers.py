"""The graph pipeline and the fan-out through consumers in containers that testcontainers starts
on a Docker engine, from the project's own images (.ci/build-images --engine docker): Apache
Kafka from the broker's Maven jars, two memcached, FerretDB and the project's image, each on the
host's network (the engine of .ci/docker-engine has no bridge) on free loopback ports.

Where no engine answers (DOCKER_HOST, or Docker's default socket) the module is skipped with the
reason. The images are built by the module's fixture unless ``FANOUT_IMAGES_BUILT=1`` says
the caller built them from the current sources (as .ci/run does, beside the main test run).
"""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from testcontainers.core.container import DockerContainer
from testcontainers.core.wait_strategies import LogMessageWaitStrategy

from tests.mongo_servers import docker_skip_reason
from tests.pipeline_checks import (
    await_graph_applied,
    committed_lag,
    publish_graph,
    publish_posts,
    timelines_match,
    until,
)
from timeline_fanout.cli import wiring
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph import ListKind, ListRef
from timeline_fanout.producers import create_topics
from timeline_fanout_devstack.ports import free_port

pytestmark = pytest.mark.skipif(
    docker_skip_reason() is not None,
    reason=f"testcontainers cannot start images: {docker_skip_reason()}",
)

ROOT = Path(__file__).parents[2]
PROJECT_IMAGE = "localhost/timeline-fanout:latest"
LABEL = {"org.timeline-fanout.test": "test_containers"}


def on_host(image: str, *command: str) -> DockerContainer:
    """A container of ``image`` on the host's network, labelled as this module's."""
    container = DockerContainer(image).with_kwargs(network_mode="host", labels=LABEL)
    return container.with_command(list(command)) if command else container


def listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


@dataclass(frozen=True)
class Servers:
    """The backing services' addresses, and what the consumers' containers are given."""

    kafka: str
    memcached: str
    mongo_port: int

    def settings(self, prefix: str, home: Path) -> Settings:
        return Settings(
            home=home,
            kafka=self.kafka,
            memcached=self.memcached,
            edge_store=f"mongodb://127.0.0.1:{self.mongo_port}/{prefix}",
            mongo_following="collection",
            topic_prefix=prefix,
            group=prefix,
        )


def consumer(settings: Settings, which: str) -> DockerContainer:
    """``fanout consume WHICH`` in the project's image, configured as ``settings`` say."""
    container = on_host(PROJECT_IMAGE, "consume", which)
    env = {
        "FANOUT_KAFKA": settings.kafka,
        "FANOUT_MEMCACHED": settings.memcached,
        "FANOUT_EDGE_STORE": settings.edge_store,
        "FANOUT_MONGO_FOLLOWING": settings.mongo_following,
        "FANOUT_TOPIC_PREFIX": settings.topic_prefix,
        "FANOUT_GROUP": settings.group,
    }
    for key, value in env.items():
        container.with_env(key, value)
    return container


@pytest.fixture(scope="module")
def images() -> None:
    if os.environ.get("FANOUT_IMAGES_BUILT") == "1":
        return
    built = subprocess.run(
        ["bash", ".ci/build-images", "--engine", "docker"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-3000:]


@pytest.fixture(scope="module")
def servers(images: None) -> Iterator[Servers]:
    broker, controller, cache_a, cache_b, mongo = (free_port() for _ in range(5))
    kafka = (
        on_host("localhost/fanout-kafka:local")
        .with_env("KAFKA_PORT", str(broker))
        .with_env("KAFKA_CONTROLLER_PORT", str(controller))
        .with_env("KAFKA_HEAP", "-Xmx256m")
        .waiting_for(LogMessageWaitStrategy("Kafka Server started").with_startup_timeout(120))
    )
    memcached = [
        on_host("localhost/fanout-memcached:local", "-m", "64", "-l", "127.0.0.1", "-p", str(p))
        for p in (cache_a, cache_b)
    ]
    ferretdb = on_host("localhost/fanout-ferretdb:local", "-listen", f"127.0.0.1:{mongo}")
    with kafka, memcached[0], memcached[1], ferretdb:
        for port in (cache_a, cache_b, mongo):
            until(lambda p=port: listening(p), 30, f"a server of the images on port {port}")  # type: ignore[misc]
        yield Servers(f"127.0.0.1:{broker}", f"127.0.0.1:{cache_a},127.0.0.1:{cache_b}", mongo)


@pytest.fixture
def settings(servers: Servers, tmp_path: Path) -> Settings:
    prefix = f"tc{uuid.uuid4().hex[:8]}"
    settings = servers.settings(prefix, tmp_path)
    create_topics(settings.kafka, settings.topics.all(), 3)
    return settings


def test_the_graph_pipeline_runs_in_a_container(settings: Settings) -> None:
    with consumer(settings, "graph"):
        follows = publish_graph(settings, "g", users=60, authors=5)
        with wiring.publisher(settings) as publisher:
            publisher.publish({"type": "unfollow", "follower": "gu0", "followee": "ga0"})
        follows["gu0"].discard("ga0")
        await_graph_applied(settings)
    store = wiring.edge_store(settings)
    lists = wiring.list_store(settings, store)
    for author in (f"ga{j}" for j in range(5)):
        expected = {user for user, followees in follows.items() if author in followees}
        assert set(store.followers(author)) == expected
        assert lists.read(ListRef(ListKind.FOLLOWERS, author)) == expected


def test_posts_reach_every_timeline_through_a_fanout_container(settings: Settings) -> None:
    with consumer(settings, "graph"), consumer(settings, "fanout"):
        follows = publish_graph(settings, "p", users=40, authors=4)
        await_graph_applied(settings)
        posts = publish_posts(settings, [f"pa{j}" for j in range(4)], 80, "p")
        until(lambda: timelines_match(settings, follows, posts), 120, "every timeline complete")


def test_a_fanout_container_killed_mid_stream_and_restarted_loses_nothing(
    settings: Settings,
) -> None:
    # 40 authors, each user following about half: ~500 posts per timeline, below timeline_max.
    with consumer(settings, "graph"):
        follows = publish_graph(settings, "k", users=30, authors=40)
        await_graph_applied(settings)
    authors = [f"ka{j}" for j in range(40)]
    with consumer(settings, "fanout") as fanout:
        posts = publish_posts(settings, authors, 800, "k-before")
        # Killed while it delivers: some of the posts are committed, some not yet.
        until(
            lambda: 0 < committed_lag(settings, "fanout", settings.topics.posts) < len(posts),
            120,
            "the fan-out consumer part-way through the posts",
            poll=0.02,
        )
        wrapped = fanout.get_wrapped_container()
        wrapped.kill()  # SIGKILL: no batch finished, nothing committed on the way out
        wrapped.reload()
        assert wrapped.status == "exited"
        posts |= publish_posts(settings, authors, 100, "k-while-down")
        wrapped.start()
        posts |= publish_posts(settings, authors, 100, "k-after")
        until(lambda: timelines_match(settings, follows, posts), 180, "every timeline complete")
        until(
            lambda: committed_lag(settings, "fanout", settings.topics.posts) == 0,
            60,
            "every post committed",
        )
        wrapped.reload()
        assert wrapped.status == "running"
