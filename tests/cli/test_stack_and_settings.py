"""The local stack commands, run under a private FANOUT_HOME so they do not touch the
session's stack; and the precedence of settings."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pymongo
import pytest

from tests.conftest import BROKER
from tests.mongo_servers import ferretdb_skip_reason
from timeline_fanout.cli import wiring
from timeline_fanout.cli.recorded_settings import load_settings
from timeline_fanout.cli.settings import Settings
from timeline_fanout_devstack.mongo_server import identify, mongo_answers
from timeline_fanout_devstack.stack import StackState


def fanout(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FANOUT_")}
    env["FANOUT_HOME"] = str(home)
    env["FANOUT_BROKER"] = BROKER  # the session's broker
    return subprocess.run(
        [sys.executable, "-m", "timeline_fanout", *args],
        env=env,
        text=True,
        capture_output=True,
        timeout=120,
        check=False,
    )


@pytest.mark.tansu_smoke
def test_up_twice_status_followers_down(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = fanout(home, "stack", "up")
    assert first.returncode == 0, first.stderr
    state = StackState.load(home / "stack.json")
    assert state is not None and len(state.memcached.split(",")) == 3
    assert state.broker == BROKER  # FANOUT_BROKER, as the session's stack
    again = fanout(home, "stack", "up")
    assert again.returncode == 0 and StackState.load(home / "stack.json") == state
    status = fanout(home, "stack", "status")
    assert status.returncode == 0 and status.stdout.count(": up") == 4  # 3 memcached, a broker
    # Later commands find the recorded stack without any exports.
    assert fanout(home, "publish", "follow", "a", "b").returncode == 0
    done = fanout(home, "consume", "graph", "--until-idle", "2")
    assert done.returncode == 0, done.stderr
    assert fanout(home, "followers", "b").stdout.strip() == "b (1): a"
    assert fanout(home, "stack", "down").returncode == 0
    assert fanout(home, "stack", "status").returncode == 1
    assert not (home / "stack.json").exists()


def test_up_with_the_mongodb_edge_store_runs_ferretdb_and_records_its_url(tmp_path: Path) -> None:
    if reason := ferretdb_skip_reason():
        pytest.skip(reason)
    home = tmp_path / "home"
    up = fanout(home, "stack", "up", "--edge-store", "mongodb")
    assert up.returncode == 0, up.stderr
    state = StackState.load(home / "stack.json")
    assert state is not None and state.edge_store is not None
    assert state.edge_store.startswith("mongodb://127.0.0.1:") and state.edge_store in up.stdout
    assert identify(state.edge_store).is_ferretdb
    status = fanout(home, "stack", "status")
    assert status.returncode == 0 and f"ferretdb {state.edge_store}: up" in status.stdout
    again = fanout(home, "stack", "up")  # a healthy stack is left alone, its edge store too
    assert again.returncode == 0 and StackState.load(home / "stack.json") == state
    # Later commands write and read the graph in FerretDB without any exports.
    assert fanout(home, "publish", "follow", "a", "b").returncode == 0
    done = fanout(home, "consume", "graph", "--until-idle", "2")
    assert done.returncode == 0, done.stderr
    assert fanout(home, "followers", "b").stdout.strip() == "b (1): a"
    with pymongo.MongoClient(state.edge_store) as client:
        edges = client.get_default_database()["followers"].find({}, {"_id": 0, "_f": 1, "_t": 1})
        assert list(edges) == [{"_f": "b", "_t": "a"}]
    assert fanout(home, "stack", "down").returncode == 0
    assert not mongo_answers(state.edge_store)


def test_environment_overrides_the_recorded_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FANOUT_HOME", str(tmp_path))
    StackState("127.0.0.1:1111", "127.0.0.1:2222,127.0.0.1:3333").save(tmp_path / "stack.json")
    for name in ("FANOUT_KAFKA", "FANOUT_MEMCACHED", "FANOUT_EDGE_STORE"):
        monkeypatch.delenv(name, raising=False)
    recorded = load_settings()
    assert recorded.kafka == "127.0.0.1:1111"
    assert recorded.memcached_servers == [("127.0.0.1", 2222), ("127.0.0.1", 3333)]
    assert recorded.edge_store_url == f"sqlite:///{tmp_path / 'edges.db'}"
    monkeypatch.setenv("FANOUT_KAFKA", "broker:9092")
    assert load_settings().kafka == "broker:9092"


def test_secrets_never_appear_in_settings_reprs() -> None:
    settings = Settings(
        edge_store="mongodb://admin:s3cret@db/fanout",
        kafka_config={"sasl.username": "app", "sasl.password": "hunter2"},
    )
    text = repr(settings) + str(settings)
    assert "s3cret" not in text and "hunter2" not in text
    assert settings.kafka_config["sasl.password"] == "hunter2"  # still passed through


def test_each_consumer_takes_its_own_batch_size(settings: Settings) -> None:
    sized = settings.model_copy(update={"batch_size": 3, "graph_batch_size": 7})
    loops = [
        wiring.graph_loop(sized, threading.Event()),
        wiring.fanout_loop(sized, threading.Event()),
    ]
    try:
        assert [loop.batch_size for loop in loops] == [7, 3]
    finally:
        for loop in loops:
            loop.source.close()


def test_a_topic_prefix_isolates_cache_group_and_edge_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FANOUT_HOME", str(tmp_path))
    for name in ("CACHE_PREFIX", "GROUP", "EDGE_STORE", "TOPIC_PREFIX"):
        monkeypatch.delenv(f"FANOUT_{name}", raising=False)
    default = Settings()
    assert (default.cache_prefix, default.group) == ("tf", "fanout")
    assert default.edge_store_url == f"sqlite:///{tmp_path / 'edges.db'}"

    monkeypatch.setenv("FANOUT_TOPIC_PREFIX", "run2")
    run2 = Settings()
    assert (run2.cache_prefix, run2.group) == ("tf.run2", "run2")
    assert run2.edge_store_url == f"sqlite:///{tmp_path / 'edges-run2.db'}"

    monkeypatch.setenv("FANOUT_CACHE_PREFIX", "shared")
    monkeypatch.setenv("FANOUT_GROUP", "g")
    monkeypatch.setenv("FANOUT_EDGE_STORE", "sqlite:////tmp/x.db")
    explicit = Settings()
    assert (explicit.cache_prefix, explicit.group) == ("shared", "g")
    assert explicit.edge_store_url == "sqlite:////tmp/x.db"
