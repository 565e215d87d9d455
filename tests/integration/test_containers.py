"""The graph pipeline against the real images (Apache Kafka, MongoDB, memcached) where a Docker
engine is available; skipped, with that reason, where it is not."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.mongo_servers import MongoServer, docker_skip_reason
from timeline_fanout.cli import wiring
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph import ListKind, ListRef
from timeline_fanout.producers import create_topics

pytestmark = pytest.mark.skipif(
    docker_skip_reason() is not None,
    reason=f"testcontainers cannot start images: {docker_skip_reason()}",
)


@pytest.fixture(scope="module")
def containers(real_mongodb: MongoServer) -> Iterator[dict[str, Any]]:
    """Kafka and memcached images for this module; MongoDB is the session's one container."""
    from testcontainers.core.container import DockerContainer
    from testcontainers.kafka import KafkaContainer

    with (
        KafkaContainer("confluentinc/cp-kafka:7.6.0").with_kraft() as kafka,
        DockerContainer("memcached:1.6-alpine").with_exposed_ports(11211) as memcached,
    ):
        yield {
            "kafka": kafka.get_bootstrap_server(),
            "mongo": real_mongodb.database_url(),
            "memcached": f"{memcached.get_container_host_ip()}:{memcached.get_exposed_port(11211)}",
        }


def test_graph_pipeline_on_real_images(containers: dict[str, Any]) -> None:
    settings = Settings(
        kafka=containers["kafka"],
        memcached=containers["memcached"],
        edge_store=containers["mongo"],
        topic_prefix="it",
        group="it",
    )
    create_topics(settings.kafka, settings.topics.all(), 3)
    with wiring.publisher(settings) as publisher:
        for i in range(100):
            publisher.publish({"type": "follow", "follower": f"f{i}", "followee": "star"})
        publisher.publish({"type": "unfollow", "follower": "f0", "followee": "star"})
    loop = wiring.graph_loop(settings, threading.Event())
    loop.run(until_idle=5)
    loop.source.close()
    store = wiring.edge_store(settings)
    expected = {f"f{i}" for i in range(1, 100)}
    assert set(store.followers("star")) == expected
    assert wiring.list_store(settings, store).read(ListRef(ListKind.FOLLOWERS, "star")) == expected
