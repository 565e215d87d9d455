"""The capacity model's invariants: pure arithmetic over the committed bench/results, no servers."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.capacity import capacity_model as model
from bench.capacity.capacity_model import Measured, Plan, Workload, followers, plan, zipf_norm

MEASURED = model.load_measured()
SIZES = [10_000, 1_000_000, 30_000_000, 100_000_000, 1_000_000_000]
RESOURCES = (
    "fanout_processes",
    "graph_processes",
    "posts_partitions",
    "graph_partitions",
    "api_cores",
    "api_cores_memo",
    "cache_gb",
    "cache_ops_per_s",
    "memcached_servers",
    "store_edges_gb",
    "store_posts_gb_per_day",
)


def twitter(users: int, m: Measured = MEASURED) -> Plan:
    return plan(Workload.twitter_2012(users), m)


def test_every_measured_input_is_positive_and_names_its_source() -> None:
    for f in dataclasses.fields(Measured):
        value = getattr(MEASURED, f.name)
        if isinstance(value, float):
            assert value > 0, f.name
            assert f.name in MEASURED.sources, f.name
    assert MEASURED.sources["deliveries_per_s"].startswith("fanout-rate.json")
    assert MEASURED.sources["graph_events_per_s"].startswith(("graph-ingest.json", "capacity.json"))
    assert MEASURED.sources["graph_ingest_events_per_s"].startswith("graph-ingest.json")
    assert MEASURED.sources["reads_per_s_per_core"].startswith("api.json")


def test_sizes_measured_match_the_code_formats() -> None:
    """memcached's byte counter grows by exactly the token the code writes per entry/member."""
    formats = model.format_sizes()
    assert MEASURED.timeline_entry_bytes == pytest.approx(formats["timeline_entry_bytes"], 0.02)
    assert MEASURED.list_member_bytes == pytest.approx(formats["list_member_bytes"], 0.02)


def test_every_resource_is_monotone_in_users() -> None:
    plans = [twitter(n) for n in SIZES]
    for name in RESOURCES:
        values = [getattr(p, name) for p in plans]
        assert values == sorted(values), (name, values)
    assert plans[-1].cache_gb > plans[0].cache_gb


@settings(max_examples=40)
@given(st.integers(10_000, 2_000_000_000), st.floats(1.01, 3.0))
def test_more_users_never_need_less(users: int, more: float) -> None:
    small, big = twitter(users), twitter(int(users * more))
    for name in RESOURCES:
        assert getattr(big, name) >= getattr(small, name), name


@pytest.mark.parametrize("users", SIZES)
def test_processes_cover_the_peak_rate_at_the_measured_per_process_rate(users: int) -> None:
    p = twitter(users)
    assert p.fanout_processes * p.posts_per_s_per_fanout_process >= p.peak_posts_per_s
    assert p.fanout_processes * MEASURED.deliveries_per_s >= p.peak_deliveries_per_s
    assert p.graph_processes * MEASURED.graph_events_per_s >= p.peak_graph_events_per_s
    assert p.api_cores * MEASURED.reads_per_s_per_core >= p.reads_per_s
    assert p.api_cores_memo * MEASURED.memo_reads_per_s_per_core >= p.reads_per_s
    # and no more than one process beyond what the rate needs
    assert (p.fanout_processes - 1) * p.posts_per_s_per_fanout_process < p.peak_posts_per_s
    assert (p.api_cores - 1) * MEASURED.reads_per_s_per_core < p.reads_per_s


@pytest.mark.parametrize("users", SIZES)
def test_partitions_leave_room_for_every_consumer(users: int) -> None:
    p = twitter(users)
    assert p.posts_partitions >= max(model.MIN_PARTITIONS, p.fanout_processes)
    assert p.graph_partitions >= max(model.MIN_PARTITIONS, p.graph_processes)
    assert p.posts_partitions >= model.PARTITION_HEADROOM * p.fanout_processes


@pytest.mark.parametrize("users", SIZES)
def test_memcached_servers_hold_the_cache_and_serve_its_operations(users: int) -> None:
    p = twitter(users)
    assert p.memcached_servers * model.MEMCACHED_GB_PER_SERVER >= p.cache_gb
    assert p.memcached_servers * model.MEMCACHED_OPS_PER_SERVER >= p.cache_ops_per_s
    assert p.cache_gb == pytest.approx(p.cache_timelines_gb + p.cache_lists_gb + p.cache_bodies_gb)
    assert p.cache_gb_3_replicas > p.cache_gb


def test_a_slower_process_never_needs_fewer_processes() -> None:
    slow = dataclasses.replace(
        MEASURED,
        deliveries_per_s=MEASURED.deliveries_per_s / 10,
        graph_events_per_s=MEASURED.graph_events_per_s / 10,
        reads_per_s_per_core=MEASURED.reads_per_s_per_core / 10,
    )
    for users in SIZES:
        fast, slower = twitter(users), twitter(users, slow)
        assert slower.fanout_processes >= fast.fanout_processes
        assert slower.graph_processes >= fast.graph_processes
        assert slower.api_cores >= fast.api_cores


def test_twitter_rates_are_reproduced_at_twitter_2012_active_users() -> None:
    users = int(model.TWITTER_2012_ACTIVE_USERS / model.ACTIVE_FRACTION)
    p = twitter(users)
    assert p.reads_per_s == pytest.approx(model.TWITTER_2012_READS_PER_S)
    assert p.posts_per_s == pytest.approx(model.TWITTER_2012_POSTS_PER_S)
    assert p.peak_posts_per_s == pytest.approx(model.TWITTER_2012_PEAK_POSTS_PER_S)


@pytest.mark.parametrize("n", [1, 100, 20_000, 20_001, 300_000])
def test_zipf_norm_matches_the_exact_sum(n: int) -> None:
    exact = math.fsum(r**-1.1 for r in range(1, n + 1))
    assert zipf_norm(n, 1.1) == pytest.approx(exact, rel=1e-6)


@pytest.mark.parametrize("users", SIZES)
def test_followers_split_into_celebrities_and_fanned_out_authors(users: int) -> None:
    edges = users * model.MEAN_FOLLOWING
    f = followers(users, edges, model.ZIPF_S, model.CELEBRITY_THRESHOLD)
    # clipping at users - 1 only ever removes edges
    assert f.celebrity_followers + f.fanned_out_followers <= edges * (1 + 1e-9)
    assert f.largest_fanned_out <= model.CELEBRITY_THRESHOLD
    assert f.celebrity_followers >= f.celebrities * model.CELEBRITY_THRESHOLD
    assert f.largest <= users - 1
    # a uniformly drawn author cannot reach more followers than the mean following
    assert twitter(users).deliveries_per_post <= model.MEAN_FOLLOWING


def test_the_table_names_each_size_and_each_measured_input() -> None:
    text = model.markdown([twitter(n) for n in model.SIZES], MEASURED)
    assert "**1M users**" in text and "**100M users**" in text and "**1B users**" in text
    for source in MEASURED.sources.values():
        assert source in text
