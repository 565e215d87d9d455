"""`--metrics-port` serves the named metrics with sensible values; `--log-format json` logs one
JSON line per batch; librdkafka's own log comes through the CLI's logging, never raw."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping

import orjson
import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Refused, run_cli, settings_env
from timeline_fanout.cli import wiring
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph import ListKind, ListRef
from timeline_fanout_devstack.ports import free_port, listens


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def run_with_metrics(
    settings: Settings, which: str, until: Mapping[str, float]
) -> tuple[dict[tuple[str, tuple[tuple[str, str], ...]], float], str]:
    """Run one consumer until every metric named in `until` sums to at least its figure.

    Events land on several partitions, so one count reaching its figure says nothing of the
    others: the scrape waits for all of them."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "timeline_fanout",
            "--log-format",
            "json",
            "consume",
            which,
            "--metrics-port",
            str(port),
            "--until-idle",
            "4",
        ],
        env=settings_env(settings),
        stderr=subprocess.PIPE,
    )
    metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            metrics = scrape(port) if listens(proc.pid, port) else {}
        except OSError:
            metrics = {}
        sums = {n: sum(v for (name, _), v in metrics.items() if name == n) for n in until}
        if all(sums[n] >= figure for n, figure in until.items()):
            break
        time.sleep(0.3)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    return metrics, err.decode()


def test_metrics_and_json_logs_after_a_run(settings: Settings) -> None:
    producer = Producer({"bootstrap.servers": settings.kafka})
    for i in range(50):
        producer.produce(
            settings.topics.graph,
            key=b"star",
            value=orjson.dumps({"type": "follow", "follower": f"f{i}", "followee": "star"}),
        )
    producer.produce(settings.topics.graph, key=b"x", value=b"{oops")
    producer.produce(settings.topics.graph, key=b"x", value=b'{"type":"unfollow"}')
    producer.flush(10)

    metrics, logs = run_with_metrics(
        settings, "graph", {"fanout_events_applied_total": 50, "fanout_dead_lettered_total": 2}
    )
    graph = (("consumer", "graph"),)
    assert metrics[("fanout_events_applied_total", (*graph, ("type", "follow")))] == 50
    assert metrics[("fanout_dead_lettered_total", (*graph, ("stage", "decode")))] == 2
    assert metrics[("fanout_dead_lettered_total", (*graph, ("stage", "apply")))] == 0
    assert metrics[("fanout_consumer_assigned", graph)] == 1
    assert metrics[("fanout_rebalances_total", (("change", "kicked"), *graph))] == 0
    assert metrics[("fanout_batch_seconds_count", graph)] >= 1
    assert 0 < metrics[("fanout_batch_seconds_sum", graph)] < 30
    # Writes never build lists (their readers do), so the graph consumer rebuilt nothing.
    assert metrics[("fanout_list_rebuilds_total", graph)] == 0
    lags = [v for (name, _), v in metrics.items() if name == "fanout_consumer_lag"]
    assert lags and all(v >= 0 for v in lags)

    lines = [orjson.loads(line) for line in logs.splitlines() if line.startswith("{")]
    batches = [line for line in lines if line["msg"] == "batch applied"]
    assert batches and sum(b["messages"] for b in batches) == 52
    assert sum(b["dead_lettered"] for b in batches) == 2
    assert len(lines) < 20  # one line per batch, never one per event

    # Half the followers are active readers: their timelines are cached and get the post.
    timelines = wiring.timeline_reader(settings, wiring.edge_store(settings)).timelines
    timelines.read_many([ListRef(ListKind.TIMELINE, f"f{i}") for i in range(0, 50, 2)])
    with wiring.publisher(settings) as publisher:
        publisher.publish({"type": "post", "author": "star", "post_id": "p1"})
    metrics, _ = run_with_metrics(settings, "fanout", {"fanout_deliveries_total": 25})
    fanout = (("consumer", "fanout"),)
    assert metrics[("fanout_deliveries_total", fanout)] == 25  # appends, not attempts
    assert metrics[("fanout_deliveries_skipped_total", fanout)] == 25
    assert metrics[("fanout_list_rebuilds_total", fanout)] == 1  # star's followers, on read
    cached = timelines.cached_many([ListRef(ListKind.TIMELINE, f"f{i}") for i in range(50)])
    assert len(cached) == 25 and all(len(m) == 1 for m in cached.values())


def test_the_compactions_metric_counts_compactions(settings: Settings) -> None:
    """Unfollow churn on one list makes it dirty; the writers' sampled reads compact it."""
    churn = settings.model_copy(update={"list_compact_write_prob": 1.0, "list_dirty_min": 2})
    store = wiring.edge_store(churn)
    cache = wiring.cache_cluster(churn)
    cache.settle()  # servers with epochs: a first start gives them one a lease period later
    wiring.list_store(churn, store, cache).read(ListRef(ListKind.FOLLOWERS, "star"))  # cached
    with wiring.publisher(churn) as publisher:
        for kind in ("follow", "unfollow"):
            for i in range(40):
                publisher.publish({"type": kind, "follower": f"f{i}", "followee": "star"})
    metrics, _ = run_with_metrics(churn, "graph", {"fanout_events_applied_total": 80})
    assert metrics[("fanout_list_compactions_total", (("consumer", "graph"),))] >= 1


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_librdkafka_log_lines_reach_stderr_in_the_cli_log_format_never_raw(
    settings: Settings, refused: Refused, log_format: str
) -> None:
    """A broker that refuses connections makes librdkafka log a FAIL line per attempt."""
    result = run_cli(
        settings,
        "--log-format",
        log_format,
        "publish",
        "follow",
        "a",
        "b",
        env={"FANOUT_KAFKA": str(refused), "FANOUT_KAFKA_CONFIG": '{"message.timeout.ms": 2000}'},
    )
    stderr = result.stderr.decode()
    assert result.returncode != 0, stderr
    assert not re.search(r"^%\d\|", stderr, re.MULTILINE), stderr
    if log_format == "json":
        logged = [orjson.loads(line) for line in stderr.splitlines() if line.startswith("{")]
        failures = [r for r in logged if r["logger"] == "librdkafka" and r["level"] == "ERROR"]
        assert failures and all(str(refused) in r["msg"] for r in failures), stderr
    else:
        assert re.search(rf"ERROR librdkafka FAIL .*{re.escape(str(refused))}", stderr), stderr
