"""The explorer's cache: the test stack's three memcached servers and two of its own, outside
the ring until a schedule's ring change adds them (tests/explore/adapter.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.held_ring import own_trust
from timeline_fanout.memcache.cluster import MemcacheCluster
from timeline_fanout_devstack.memcached_processes import own_server


@pytest.fixture(scope="session")
def spare_servers() -> Iterator[list[tuple[str, int]]]:
    with own_server() as (_, first), own_server() as (_, second):
        yield [first, second]


@pytest.fixture
def cache(
    cache: MemcacheCluster, spare_servers: list[tuple[str, int]]
) -> Iterator[MemcacheCluster]:
    stack = [(host, int(port)) for host, port in (s.rsplit(":", 1) for s in cache.servers)]
    servers = [*stack, *spare_servers]
    cluster = MemcacheCluster(servers, trust=own_trust(servers))
    try:
        yield cluster
    finally:
        cluster.close()
