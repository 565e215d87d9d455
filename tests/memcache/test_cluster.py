"""Typed results from real memcached servers, including the NOT_STORED ambiguity."""

from __future__ import annotations

import pytest

from tests.conftest import Refused
from timeline_fanout.memcache.cluster import (
    CacheUnavailable,
    Item,
    MemcacheCluster,
    Outcome,
    keep_ttl,
)
from timeline_fanout.memcache.ring import EpochState
from timeline_fanout.memcache.trust import ServerTrust, TrustSettings
from timeline_fanout.memcache.wire import NOT_READ, AppendGroup
from timeline_fanout_devstack.memcached_processes import end, own_server, start

STORED, NOT_STORED, EXISTS, NOT_FOUND, TOO_LARGE = (
    Outcome.STORED,
    Outcome.NOT_STORED,
    Outcome.EXISTS,
    Outcome.NOT_FOUND,
    Outcome.TOO_LARGE,
)
ITEM_LIMIT = 1024 * 1024  # memcached's default -I, which the test stack runs with


def test_writes_report_what_was_stored(cache: MemcacheCluster) -> None:
    assert cache.add_many({b"k1": b"+a "}) == {b"k1": STORED}
    assert cache.add_many({b"k1": b"+b "}) == {b"k1": NOT_STORED}  # exists: ADD refused
    assert cache.append_many({b"k1": b"+c ", b"missing": b"+d "}) == {
        b"k1": STORED,
        b"missing": NOT_STORED,
    }
    assert cache.get_many([b"k1", b"missing"]) == {b"k1": b"+a +c "}
    assert cache.exists_many([b"k1", b"missing"]) == {b"k1": True, b"missing": False}
    assert cache.set_many({b"k1": b"v", b"k2": b"w"}) == {b"k1": STORED, b"k2": STORED}
    assert STORED.ok and not any(o.ok for o in (NOT_STORED, EXISTS, NOT_FOUND, TOO_LARGE))


def test_append_past_the_item_limit_is_not_stored_but_exists(cache: MemcacheCluster) -> None:
    big = b"x" * (1000 * 1024)
    assert cache.add_many({b"big": big}) == {b"big": STORED}
    assert cache.append_many({b"big": b"y" * 100 * 1024}) == {b"big": NOT_STORED}
    assert cache.exists_many([b"big"]) == {b"big": True}


def test_an_append_larger_than_the_item_limit_is_too_large_and_the_connection_lives_on(
    cache: MemcacheCluster,
) -> None:
    """memcached answers SERVER_ERROR for the value itself and swallows it: an answer about the
    item, in line with the others of its pipeline, not a broken connection."""
    keys = [b"before", b"huge", b"after"]
    cache.set_many(dict.fromkeys(keys, b"+a "))
    huge = b"+b " * (ITEM_LIMIT // 3 + 10)
    outcomes = cache.append_many({b"before": b"+c ", b"huge": huge, b"after": b"+d "})
    assert outcomes == {b"before": STORED, b"huge": TOO_LARGE, b"after": STORED}
    assert cache.get_many(keys) == {b"before": b"+a +c ", b"huge": b"+a ", b"after": b"+a +d "}
    assert cache.append_to_each([AppendGroup(huge, [b"huge"]), AppendGroup(b"+e ", [b"huge"])]) == [
        (0, b"huge", TOO_LARGE)
    ]
    assert cache.incr_many({b"n": 1}) == {b"n": None}  # the next command works
    assert cache.add_many({b"n": b"1"}) == {b"n": STORED}
    assert cache.get_many([b"huge", b"n"]) == {b"huge": b"+a +e ", b"n": b"1"}


def test_a_set_larger_than_the_item_limit_is_too_large(cache: MemcacheCluster) -> None:
    huge = b"z" * (ITEM_LIMIT + 1)
    assert cache.set_many({b"s": huge, b"t": b"1"}) == {b"s": TOO_LARGE, b"t": STORED}
    assert cache.add_many({b"s": huge}) == {b"s": TOO_LARGE}
    assert cache.get_many([b"s", b"t"]) == {b"t": b"1"}


def test_a_counter_holding_no_number_is_deleted_and_answered_as_missing(
    cache: MemcacheCluster,
) -> None:
    cache.set_many({b"n": b"1x", b"m": b"7", b"d": b"\xff"})
    assert cache.incr_many({b"n": 1, b"m": 1}) == {b"n": None, b"m": 8}  # the connection goes on
    cache.decr_many({b"d": 1})
    assert cache.get_many([b"n", b"m", b"d"]) == {b"m": b"8"}


def test_counters_and_cas(cache: MemcacheCluster) -> None:
    assert cache.incr_many({b"n": 5}) == {b"n": None}
    cache.add_many({b"n": b"10"})
    assert cache.incr_many({b"n": 5}) == {b"n": 15}
    cache.decr_many({b"n": 4, b"absent": 1})
    assert cache.incr_many({b"n": 0, b"absent": 0}) == {b"n": 11, b"absent": None}
    cache.decr_many({b"n": 100})  # memcached stops at 0
    assert cache.incr_many({b"n": 0}) == {b"n": 0}
    cache.add_many({b"c": b"v1"})
    (value, cas_id, _) = cache.gets_many([b"c"])[b"c"]
    assert value == b"v1"
    cache.append_many({b"c": b"!"})
    assert cache.cas(b"c", b"v2", cas_id) is EXISTS  # a racing append wins
    (value, cas_id, _) = cache.gets_many([b"c"])[b"c"]
    assert value == b"v1!"
    assert cache.cas(b"c", b"v2", cas_id) is STORED
    cache.delete_many([b"c"])
    assert cache.cas(b"c", b"v3", cas_id) is NOT_FOUND


def test_cas_many_takes_one_expiry_per_key(cache: MemcacheCluster) -> None:
    keys = [b"forever", b"soon", b"gone"]
    cache.set_many(dict.fromkeys(keys, b"v"), expire=500)
    read = cache.gets_many(keys)
    swaps = {k: (b"w", read[k].cas) for k in keys}
    # 0: never expires; -1: already expired (memcached drops it at once: no waiting needed).
    outcomes = cache.cas_many(swaps, {b"forever": 0, b"soon": 100, b"gone": -1})
    assert outcomes == dict.fromkeys(keys, STORED)
    after = cache.gets_many(keys)
    assert set(after) == {b"forever", b"soon"}
    assert after[b"forever"].value == after[b"soon"].value == b"w"
    assert after[b"forever"].ttl == -1
    assert 0 < after[b"soon"].ttl <= 100
    with pytest.raises(KeyError):
        cache.cas_many({b"forever": (b"x", after[b"forever"].cas)}, {b"other": 5})


def test_gets_many_reports_time_to_live(cache: MemcacheCluster) -> None:
    cache.set_many({b"plain": b"1"})
    cache.set_many({b"leased": b"2"}, expire=60)
    found = cache.gets_many([b"plain", b"leased", b"absent"])
    assert set(found) == {b"plain", b"leased"}
    assert found[b"plain"].ttl == -1
    assert 0 < found[b"leased"].ttl <= 60
    assert isinstance(found[b"plain"], Item) and found[b"plain"].value == b"1"
    # What a rewrite writes back: never a longer life, never "forever" for an expiring item.
    assert keep_ttl(found[b"plain"].ttl) == 0
    assert keep_ttl(found[b"leased"].ttl) == found[b"leased"].ttl
    assert keep_ttl(0) == 1


def test_delete_if_unchanged_deletes_only_the_item_that_was_read(cache: MemcacheCluster) -> None:
    cache.set_many({b"k": b"+a ", b"other": b"+a "})
    old = cache.gets_many([b"k", b"other"])
    cache.append_many({b"k": b"+b "})  # k changed since it was read; other did not
    outcomes = cache.delete_if_unchanged({b"k": old[b"k"].cas, b"other": old[b"other"].cas})
    assert outcomes == {b"k": EXISTS, b"other": STORED}
    assert cache.get_many([b"k", b"other"]) == {b"k": b"+a +b "}
    now = cache.gets_many([b"k"])[b"k"].cas
    assert cache.delete_if_unchanged({b"k": now}) == {b"k": STORED}
    assert cache.delete_if_unchanged({b"k": now, b"never": now}) == {
        b"k": NOT_FOUND,
        b"never": NOT_FOUND,
    }
    assert cache.exists_many([b"k"]) == {b"k": False}


def test_an_item_read_without_its_versions_is_never_written_back(cache: MemcacheCluster) -> None:
    """The event loop's reads ask for values alone (``Item.cas`` empty, ``ttl`` NOT_READ): an
    item without a version has nothing to be written back against, and an unknown expiry could
    make an item immortal, so every conditional write refuses such an item before sending
    anything."""
    cache.set_many({b"k": b"+a "})
    unread = Item(b"+a ", b"", NOT_READ)
    with pytest.raises(ValueError):
        cache.delete_if_unchanged({b"k": unread.cas})
    with pytest.raises(ValueError):
        cache.cas(b"k", b"+a +b ", unread.cas)
    with pytest.raises(ValueError):
        keep_ttl(unread.ttl)
    assert cache.gets_many([b"k"])[b"k"].value == b"+a "


def test_keys_spread_over_every_server(cache: MemcacheCluster) -> None:
    owners = {cache.server_for(b"key%d" % i) for i in range(100)}
    assert owners == set(cache.servers) and len(owners) == 3


def test_a_lone_server_that_does_not_answer_is_revoked_and_its_keys_go_to_the_store(
    refused: Refused,
) -> None:
    """One server alone keeps writing through its failure: the write it missed is recorded
    as its new epoch, down, in the register (the caller may commit), a read misses, and
    ``available`` sends its keys to the store until it answers again."""
    dead = MemcacheCluster([refused.pair], timeout=0.5)
    assert dead.append_many({b"k": b"+a "}) == {b"k": Outcome.NOT_STORED}
    name = f"{refused.pair[0]}:{refused.pair[1]}"
    assert dead.trust.ring.record.epoch(name).state is EpochState.DOWN
    assert dead.get_many([b"k"]) == {}
    assert dead.available([b"k"]) == [False]


def test_placement_is_hashclients_for_each_lists_key(cache: MemcacheCluster) -> None:
    from pymemcache.client.hash import HashClient

    servers = [(h, int(p)) for h, _, p in (s.rpartition(":") for s in cache.servers)]
    reference = HashClient(servers)
    for i in range(200):
        key = f"tf|fl|user{i}|abcd|{i % 7}"
        node = reference.hasher.get_node(f"tf|fl|user{i}")  # a list's items go with its key
        assert cache.server_for(key.encode()) == node


def test_batches_larger_than_one_pipeline(cache: MemcacheCluster) -> None:
    from timeline_fanout.memcache.exchange import PIPELINE

    keys = [b"big%d" % i for i in range(3 * PIPELINE + 7)]
    assert set(cache.add_many(dict.fromkeys(keys, b"+a ")).values()) == {STORED}
    assert set(cache.append_many(dict.fromkeys(keys, b"+b " * 500)).values()) == {STORED}
    assert len(cache.get_many(keys)) == len(keys)
    counters = [b"n%d" % i for i in range(len(keys))]
    assert set(cache.incr_many(dict.fromkeys(counters, 1)).values()) == {None}


def test_one_value_appended_to_many_keys_reports_the_refused_ones(cache: MemcacheCluster) -> None:
    keys = [b"many%d" % i for i in range(5000)]  # several pipelines per server
    cache.add_many(dict.fromkeys(keys[::2], b"+a "))
    refused = cache.append_to_each([AppendGroup(b"+b ", keys), AppendGroup(b"+c ", keys[:10])])
    assert sorted(refused, key=lambda r: (r[0], r[1])) == sorted(
        [(0, k, NOT_STORED) for k in keys[1::2]] + [(1, k, NOT_STORED) for k in keys[1:10:2]],
        key=lambda r: (r[0], r[1]),
    )
    values = cache.get_many(keys)
    assert set(values) == set(keys[::2])
    assert values[keys[0]] == b"+a +b +c " and values[keys[-2]] == b"+a +b "


def test_an_error_reply_closes_the_connection_and_the_next_call_starts_clean(
    cache: MemcacheCluster,
) -> None:
    with pytest.raises(CacheUnavailable, match=r"ERROR|replies"):
        cache.append_to_each(
            [AppendGroup(b"+a ", [b"k" * 300])]
        )  # longer than memcached's key limit
    assert cache.add_many({b"after": b"1"}) == {b"after": STORED}
    assert cache.incr_many({b"after": 2}) == {b"after": 3}


def test_batch_placement_is_hashclients_for_any_number_of_servers() -> None:
    from pymemcache.client.rendezvous import RendezvousHash

    from timeline_fanout.memcache.ring import Placement, RingRecord

    for count in (1, 2, 3, 5):
        nodes = [f"10.0.0.{i}:11211" for i in range(count)]
        reference = RendezvousHash(nodes)  # pymemcache's own pure-Python murmur3
        placement = Placement(RingRecord.of(nodes))
        keys = [b"tf|tl|user%d" % i for i in range(300)]
        owners = placement.owners(keys)
        assert [placement.nodes[o] for o in owners] == [
            reference.get_node(k.decode()) for k in keys
        ]


def test_remembered_placements_are_the_placements_across_batches_past_the_bound() -> None:
    from pymemcache.client.rendezvous import RendezvousHash

    from timeline_fanout.memcache.ring import Placement, RingRecord

    nodes = [f"10.0.0.{i}:11211" for i in range(3)]
    reference = RendezvousHash(nodes)
    # overlapping batches outgrow the bound again and again
    placement = Placement(RingRecord.of(nodes), remembered=50)
    for first in range(0, 400, 30):
        keys = [b"tf|tl|user%d" % i for i in range(first, first + 45)][::-1]
        owners = placement.owners(keys + keys[:5])  # a repeat within the batch
        expected = [reference.get_node(k.decode()) for k in keys + keys[:5]]
        assert [placement.nodes[o] for o in owners] == expected


def test_reads_take_values_by_length_whatever_bytes_they_hold(cache: MemcacheCluster) -> None:
    tricky = {
        b"crlf": b"a\r\nEN\r\nVA 3 c1 t-1\r\nxyz\r\n",
        b"big": bytes(range(256)) * 3600,  # ~900 KB: arrives over many reads
        b"empty": b"",
    }
    cache.set_many(tricky)
    keys = [b"crlf", b"absent", b"big", b"empty", b"crlf"]  # a miss and a repeat in between
    assert cache.get_many(keys) == tricky
    found = cache.gets_many(keys)
    assert {k: item.value for k, item in found.items()} == tricky
    assert cache.cas(b"crlf", b"new", found[b"crlf"].cas) is STORED


def test_versions_probe_every_server_and_name_the_one_down(
    cache: MemcacheCluster, refused: Refused
) -> None:
    assert len(cache.versions()) == 3 and all(v for v in cache.versions().values())
    down = MemcacheCluster([refused.pair], timeout=0.5)
    with pytest.raises(CacheUnavailable, match=r"memcached 127\.0\.0\.1:"):
        down.versions()


def test_a_cas_id_read_before_a_restart_never_matches_an_item_written_after_it() -> None:
    """memcached counts CAS ids from 1 again when it restarts, so the id of an item read before
    can be the id of a newer item of the same key; a fence that sent it (a rebuild's commit, a
    rollover, a body fill) would overwrite or drop that item. Any restart closes the connection
    the id was read on, and an id is never sent on another connection."""
    with own_server() as (proc, (host, port)):
        trust = ServerTrust([f"{host}:{port}"], TrustSettings(0.3, 0.3))
        cache = MemcacheCluster([(host, port)], trust=trust)
        cache.set_many({b"k": b"old"})
        token = cache.gets_many([b"k"])[b"k"].cas
        end(proc)
        restarted = start(port)
        try:
            assert cache.get_many([b"k"]) == {}  # the old connection fails: down, then probed
            for _ in range(50):
                if cache.available([b"k"]) == [True]:
                    break
                cache.wait(0.1)
            cache.set_many({b"k": b"new"})  # the restarted server's first id: the old one's
            assert cache.cas(b"k", b"stale", token) is EXISTS
            assert cache.delete_if_unchanged({b"k": token}) == {b"k": EXISTS}
            fresh = cache.gets_many([b"k"])[b"k"]
            assert fresh.value == b"new"
            assert cache.cas(b"k", b"newer", fresh.cas) is STORED
        finally:
            end(restarted)
