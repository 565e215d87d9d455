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


def test_one_value_appended_to_many_keys_reports_the_refused_ones(cache: MemcacheCluster) -> None:
    keys = [b"many%d" % i for i in range(5000)]  # several pipelines per server
    cache.add_many(dict.fromkeys(keys[::2], b"+a "))
    refused = cache.append_to_each([(b"+b ", keys), (b"+c ", keys[:10])])
    assert sorted(refused) == sorted([(0, k) for k in keys[1::2]] + [(1, k) for k in keys[1:10:2]])
    values = cache.get_many(keys)
    assert set(values) == set(keys[::2])
    assert values[keys[0]] == b"+a +b +c " and values[keys[-2]] == b"+a +b "


def test_an_error_reply_closes_the_connection_and_the_next_call_starts_clean(
    cache: MemcacheCluster,
) -> None:
    with pytest.raises(CacheUnavailable, match=r"ERROR|replies"):
        cache.append_to_each([(b"+a ", [b"k" * 300])])  # longer than memcached's key limit
    assert cache.add_many({b"after": b"1"}) == {b"after": True}
    assert cache.incr_many({b"after": 2}) == {b"after": 3}


def test_batch_placement_is_hashclients_for_any_number_of_servers() -> None:
    from pymemcache.client.rendezvous import RendezvousHash

    from graph.cache import RendezvousRing

    for count in (1, 2, 3, 5):
        nodes = [f"10.0.0.{i}:11211" for i in range(count)]
        reference = RendezvousHash(nodes)  # pymemcache's own pure-Python murmur3
        ring = RendezvousRing(nodes)
        keys = [b"tf:tl:user%d" % i for i in range(300)]
        owners = ring.owners(keys)
        assert [ring.nodes[o] for o in owners] == [reference.get_node(k.decode()) for k in keys]


def test_reads_take_values_by_length_whatever_bytes_they_hold(cache: MemcacheCluster) -> None:
    tricky = {
        b"crlf": b"a\r\nEN\r\nVA 3 c1\r\nxyz\r\n",
        b"big": bytes(range(256)) * 3600,  # ~900 KB: arrives over many reads
        b"empty": b"",
    }
    cache.set_many(tricky)
    keys = [b"crlf", b"absent", b"big", b"empty", b"crlf"]  # a miss and a repeat in between
    assert cache.get_many(keys) == tricky
    found = cache.gets_many(keys)
    assert {k: v for k, (v, _) in found.items()} == tricky
    assert cache.cas(b"crlf", b"new", found[b"crlf"][1]) is True
