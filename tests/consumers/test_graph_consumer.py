"""The graph consumer end to end: publisher -> broker -> `fanout consume graph` -> lists."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.conftest import run_cli, settings_env
from tests.kafka_helpers import read_topic
from timeline_fanout.cli import wiring
from timeline_fanout.cli.settings import Settings
from timeline_fanout.consumers.halts import PermanentFailure
from timeline_fanout.graph import ListKind, ListRef
from timeline_fanout.producers import EventPublisher
from timeline_fanout_devstack import stack
from timeline_fanout_devstack.home import stack_file

Edge = tuple[str, str]


def random_graph_events(publisher: EventPublisher, count: int, seed: int) -> dict[Edge, bool]:
    """Follows, unfollows and re-follows over a small user set; returns the final model."""
    rng = random.Random(seed)
    model: dict[Edge, bool] = {}
    users = [f"u{i}" for i in range(60)]
    for _ in range(count):
        follower, followee = rng.sample(users, 2)
        active = rng.random() < 0.65
        kind = "follow" if active else "unfollow"
        publisher.publish({"type": kind, "follower": follower, "followee": followee})
        model[(follower, followee)] = active
    return model


def assert_lists_match(settings: Settings, model: dict[Edge, bool]) -> None:
    store = wiring.edge_store(settings)
    lists = wiring.list_store(settings, store)
    users = {u for edge in model for u in edge}
    refs = [ListRef(kind, u) for u in users for kind in ListKind]
    got = lists.read_many(refs)
    for user in users:
        followers = {a for (a, b), on in model.items() if on and b == user}
        following = {b for (a, b), on in model.items() if on and a == user}
        assert got[ListRef(ListKind.FOLLOWERS, user)] == followers, user
        assert got[ListRef(ListKind.FOLLOWING, user)] == following, user
        assert set(store.followers(user)) == followers


def test_thousands_of_random_events_end_in_exact_lists(settings: Settings) -> None:
    with EventPublisher(settings.kafka, settings.topics) as publisher:
        model = random_graph_events(publisher, 3000, seed=11)
        time.sleep(0.005)  # removals are ordered against follows by event time (ms)
        publisher.publish({"type": "user_removed", "user": "u7"})
        time.sleep(0.005)
        publisher.publish({"type": "follow", "follower": "u7", "followee": "u8"})
    model = {e: on and "u7" not in e for e, on in model.items()}
    model[("u7", "u8")] = True
    done = run_cli(settings, "consume", "graph", "--until-idle", "3")
    assert done.returncode == 0, done.stderr.decode()
    assert b"applied 3002" in done.stderr
    assert_lists_match(settings, model)

    cli = run_cli(settings, "followers", "u8", "u1", "--json")
    lines = [orjson.loads(line) for line in cli.stdout.splitlines()]
    assert [line["user"] for line in lines] == ["u8", "u1"]
    expected = sorted(a for (a, b), on in model.items() if on and b == "u8")
    assert lines[0] == {"user": "u8", "followers": expected, "count": len(expected)}

    # A replay of the whole topic under a fresh group changes nothing.
    replay = settings.model_copy(update={"group": settings.group + "-replay"})
    assert run_cli(replay, "consume", "graph", "--until-idle", "3").returncode == 0
    assert_lists_match(settings, model)


def test_bad_messages_go_to_the_dead_letter_topic_and_the_rest_is_applied(
    settings: Settings,
) -> None:
    producer = Producer({"bootstrap.servers": settings.kafka})
    wrong_key = b'{"type":"follow","follower":"w1","followee":"u2"}'
    bad: list[tuple[bytes | None, bytes | None, str]] = [
        (b"k", b"not json", "not valid JSON"),
        (b"k", b"\xff\xfe\xfa", "not valid UTF-8"),
        (b"k", b'{"type":"follow","follower":"a b","followee":"u2"}', "follower: must be"),
        (b"k", b'{"type":"follow","follower":"u1"}', "followee"),
        (b"k", b'{"type":"like","follower":"u1"}', "unknown event type"),
        (b"u1", b'{"type":"post","author":"u1","post_id":"p1"}', "do not belong"),
        (b"k", b"[" * 50000, "not valid JSON"),
        # The key orders a list's events; a follow keyed by another user is not applied.
        (b"u1", wrong_key, "key: 'u1'; must be the event's followee 'u2'"),
        (None, wrong_key.replace(b"w1", b"w2"), "key: missing; must be the event's followee"),
        (b"u2", None, "null value (a tombstone)"),
    ]
    good = 0
    for i, (key, payload, _) in enumerate(bad):
        producer.produce(settings.topics.graph, key=key, value=payload)
        producer.produce(
            settings.topics.graph,
            key=b"u2",
            value=orjson.dumps({"type": "follow", "follower": f"g{i}", "followee": "u2"}),
        )
        good += 1
    producer.flush(10)
    done = run_cli(settings, "consume", "graph", "--until-idle", "3")
    assert done.returncode == 0, done.stderr.decode()
    dead = read_topic(settings.kafka, settings.topics.dlq, len(bad))
    assert len(dead) == len(bad)
    by_value = {m.value(): dict(m.headers()) for m in dead}
    for _, payload, reason in bad:
        headers = by_value[payload or b""]  # a tombstone is dead-lettered with an empty value
        assert reason in headers["fanout.dlq.reason"].decode()
        assert headers["fanout.dlq.topic"].decode() == settings.topics.graph
        assert int(headers["fanout.dlq.offset"]) >= 0
    assert_lists_match(settings, {(f"g{i}", "u2"): True for i in range(good)})


@pytest.mark.edge_stores("sqlite", "ferretdb-index")
def test_two_consumers_in_one_group_split_partitions_and_converge(settings: Settings) -> None:
    """On FerretDB a store call can outlast the default 10 s poll interval on a busy machine
    (its backend scans): there the interval is 120 s, as in the fault suite, so no member is
    put out of the group mid-batch."""
    if settings.edge_store.startswith("mongodb"):
        settings = settings.model_copy(update={"max_poll_interval_ms": 120_000})
    with EventPublisher(settings.kafka, settings.topics) as publisher:
        model = random_graph_events(publisher, 1500, seed=12)
    env = settings_env(settings)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "timeline_fanout", "consume", "graph", "--until-idle", "6"],
            env=env,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=300)[1].decode() for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    applied = [int(o.split("applied ")[1].split(",")[0]) for o in outputs]
    assert sum(applied) >= 1500, outputs
    assert_lists_match(settings, model)


def test_sigterm_finishes_the_batch_commits_and_exits(settings: Settings) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "timeline_fanout", "consume", "graph"],
        env=settings_env(settings),
        stderr=subprocess.PIPE,
    )
    with EventPublisher(settings.kafka, settings.topics) as publisher:
        model = random_graph_events(publisher, 500, seed=13)
    store = wiring.edge_store(settings)
    deadline = time.monotonic() + 60
    while (
        time.monotonic() < deadline and store.counts("u1").followers + len(list(store.users())) == 0
    ):
        time.sleep(0.2)
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    assert b"applied 500" in err
    consumer = Consumer(
        {"bootstrap.servers": settings.kafka, "group.id": f"{settings.group}.graph"}
    )
    partitions = (
        consumer.list_topics(settings.topics.graph, timeout=10)
        .topics[settings.topics.graph]
        .partitions
    )
    committed = consumer.committed(
        [TopicPartition(settings.topics.graph, p) for p in partitions], timeout=10
    )
    consumer.close()
    # Offsets start at 0 in every partition, so the committed offsets add up to the messages
    # consumed.
    assert sum(tp.offset for tp in committed) == 500
    assert_lists_match(settings, model)


def committed_offsets(settings: Settings, group: str) -> int:
    consumer = Consumer({"bootstrap.servers": settings.kafka, "group.id": group})
    topic = settings.topics.graph
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    committed = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
    consumer.close()
    return sum(max(tp.offset, 0) for tp in committed)


@pytest.mark.edge_stores("sqlite", "ferretdb-collection")
def test_sigterm_mid_batch_finishes_and_commits_that_batch(settings: Settings) -> None:
    """The signal arrives while a batch is half applied (its edges stored, its list writes
    waiting on memcached servers that are stopped): that batch is finished, committed, and
    nothing is consumed twice or lost. Batches of 200 of 600 events: several batches, few
    enough for FerretDB's scanning backend to apply in well under the timeouts."""
    settings = settings.model_copy(update={"graph_batch_size": 200})
    with EventPublisher(settings.kafka, settings.topics) as publisher:
        model = random_graph_events(publisher, 600, seed=14)
    state = stack.StackState.load(stack_file())
    assert state is not None
    memcached = [s.pid for s in state.services if s.name.startswith("memcached")]
    store = wiring.edge_store(settings)
    for pid in memcached:  # list writes block (below the client's 2 s timeout) mid-batch
        os.kill(pid, signal.SIGSTOP)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "timeline_fanout", "--log-format", "json", "consume", "graph"],
            env=settings_env(settings),
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while not list(store.users()) and time.monotonic() < deadline:
            time.sleep(0.02)  # polling a condition: the batch's edges are in the store
        proc.send_signal(signal.SIGTERM)
    finally:
        for pid in memcached:
            os.kill(pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    lines = [orjson.loads(line) for line in err.splitlines() if line.startswith(b"{")]
    messages = [str(line["msg"]) for line in lines]
    signalled = next(i for i, msg in enumerate(messages) if msg.startswith("signal"))
    batches = [line for line in lines if line["msg"] == "batch applied"]
    assert len(batches) == 1 and messages.index("batch applied") > signalled, messages
    assert "retrying" not in err.decode()  # finished on the first attempt, not given up
    first_run = int(str(batches[0]["applied"]))
    assert committed_offsets(settings, f"{settings.group}.graph") == first_run > 0

    done = run_cli(settings, "consume", "graph", "--until-idle", "3", timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    assert f"applied {600 - first_run}," in done.stderr.decode()  # the rest, exactly once
    assert_lists_match(settings, model)


def test_a_dropped_table_halts_the_consumer_without_committing(settings: Settings) -> None:
    """A permanent store failure is not retried forever and not dead-lettered: the loop
    halts, names it, commits nothing."""
    loop = wiring.graph_loop(settings, threading.Event())
    path = settings.edge_store_url.removeprefix("sqlite:///")
    sqlite3.connect(path, isolation_level=None).execute("DROP TABLE edges")
    with EventPublisher(settings.kafka, settings.topics) as publisher:
        random_graph_events(publisher, 50, seed=15)
    with pytest.raises(PermanentFailure, match="no such table: edges"):
        loop.run(until_idle=3)
    loop.source.close()
    assert loop.stats.dead_lettered == loop.stats.retries == 0
    assert committed_offsets(settings, f"{settings.group}.graph") == 0
    assert read_topic(settings.kafka, settings.topics.dlq, 1, timeout=2) == []


def test_a_corrupt_edge_store_file_exits_non_zero_naming_the_error(
    settings: Settings, tmp_path: Path
) -> None:
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"this is not a database " * 400)
    broken = settings.model_copy(update={"edge_store": f"sqlite:///{corrupt}"})
    done = run_cli(broken, "consume", "graph", "--until-idle", "2")
    assert done.returncode == PermanentFailure.exit_code == 4
    err = done.stderr.decode()
    assert "halted" in err and "file is not a database" in err
