"""Typed results from real memcached servers, including the NOT_STORED ambiguity."""

from __future__ import annotations

import pytest

from fanout.stack import free_port
from graph.cache import CacheUnavailable, MemcacheCluster


def test_writes_report_what_was_stored(cache: MemcacheCluster) -> None:
    assert cache.add_many({b"k1": b"+a "}) == {b"k1": True}
    assert cache.add_many({b"k1": b"+b "}) == {b"k1": False}  # exists: ADD refused
    assert cache.append_many({b"k1": b"+c ", b"missing": b"+d "}) == {
        b"k1": True,
        b"missing": False,
    }
    assert cache.get_many([b"k1", b"missing"]) == {b"k1": b"+a +c "}
    assert cache.exists_many([b"k1", b"missing"]) == {b"k1": True, b"missing": False}


def test_append_past_the_item_limit_is_not_stored_but_exists(cache: MemcacheCluster) -> None:
    big = b"x" * (1000 * 1024)
    assert cache.add_many({b"big": big}) == {b"big": True}
    assert cache.append_many({b"big": b"y" * 100 * 1024}) == {b"big": False}
    assert cache.exists_many([b"big"]) == {b"big": True}


def test_counters_and_cas(cache: MemcacheCluster) -> None:
    assert cache.incr_many({b"n": 5}) == {b"n": None}
    cache.add_many({b"n": b"10"})
    assert cache.incr_many({b"n": 5}) == {b"n": 15}
    cache.add_many({b"c": b"v1"})
    (value, cas_id) = cache.gets_many([b"c"])[b"c"]
    assert value == b"v1"
    cache.append_many({b"c": b"!"})
    assert cache.cas(b"c", b"v2", cas_id) is False  # a racing append wins
    (value, cas_id) = cache.gets_many([b"c"])[b"c"]
    assert value == b"v1!"
    assert cache.cas(b"c", b"v2", cas_id) is True
    cache.delete_many([b"c"])
    assert cache.cas(b"c", b"v3", cas_id) is None


def test_keys_spread_over_both_servers(cache: MemcacheCluster) -> None:
    owners = {cache.server_for(b"key%d" % i) for i in range(100)}
    assert owners == set(cache.servers) and len(owners) == 2


def test_a_server_that_does_not_answer_raises() -> None:
    dead = MemcacheCluster([("127.0.0.1", free_port())], timeout=0.5)
    with pytest.raises(CacheUnavailable):
        dead.append_many({b"k": b"+a "})
    with pytest.raises(CacheUnavailable):
        dead.get_many([b"k"])


def test_placement_is_the_same_as_hashclients(cache: MemcacheCluster) -> None:
    from pymemcache.client.hash import HashClient

    servers = [(h, int(p)) for h, _, p in (s.rpartition(":") for s in cache.servers)]
    reference = HashClient(servers)
    for i in range(200):
        key = f"tf:fl:user{i}:abcd:{i % 7}"
        node = reference.hasher.get_node(key)
        assert cache.server_for(key.encode()) == node


def test_batches_larger_than_one_pipeline(cache: MemcacheCluster) -> None:
    from graph.cache import PIPELINE

    keys = [b"big%d" % i for i in range(3 * PIPELINE + 7)]
    assert all(cache.add_many(dict.fromkeys(keys, b"+a ")).values())
    assert all(cache.append_many(dict.fromkeys(keys, b"+b " * 500)).values())  # ~12 MB
    assert len(cache.get_many(keys)) == len(keys)
    counters = [b"n%d" % i for i in range(len(keys))]
    assert set(cache.incr_many(dict.fromkeys(counters, 1)).values()) == {None}
