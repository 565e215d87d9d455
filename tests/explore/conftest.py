"""The explorer's cache: the test stack's three memcached servers and a fourth of its own,
outside the ring until a schedule's ring change adds it (tests/explore/adapter.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.held_ring import own_trust
from timeline_fanout.memcache.cluster import MemcacheCluster
from timeline_fanout_devstack.memcached_processes import own_server


@pytest.fixture(scope="session")
def spare_server() -> Iterator[tuple[str, int]]:
    with own_server() as (_, address):
        yield address


@pytest.fixture
def cache(cache: MemcacheCluster, spare_server: tuple[str, int]) -> Iterator[MemcacheCluster]:
    stack = [(host, int(port)) for host, port in (s.rsplit(":", 1) for s in cache.servers)]
    cluster = MemcacheCluster([*stack, spare_server], trust=own_trust([*stack, spare_server]))
    try:
        yield cluster
    finally:
        cluster.close()
