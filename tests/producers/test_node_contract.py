"""Contract: events from a second, non-Python client are applied exactly as from ``EventPublisher``.

The Node producer (tests/producers/node/produce.js: kafkajs + ajv against the shipped
``event.json``, as an app developer would write it) and ``EventPublisher`` publish the same
events under two topic prefixes; after one graph and one fan-out consume of each, every user's
followers, following and home timeline must be equal, and every key must have landed on the
same partition. Graph events and post deletions (one of them published before its post) go
without the envelope (the consumer falls back to the Kafka timestamp); posts carry their ``ts``,
so timelines compare exactly. Skipped, saying why, where node or the installed modules are
missing (``bash .ci/bootstrap`` installs them).
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import settings_env
from tests.kafka_helpers import read_topic
from timeline_fanout.cli import wiring
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph import ListKind, ListRef
from timeline_fanout.producers import EventPublisher, create_topics
from timeline_fanout.schemas import validate_event

NODE_DIR = Path(__file__).with_name("node")
USERS = [f"u{i}" for i in range(10)] + ["-lead"]


def node_skip_reason() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed: the Node producer contract test needs node >= 18"
    if not (NODE_DIR / "node_modules" / "kafkajs").is_dir():
        return f"Node modules missing: run `npm ci --prefix {NODE_DIR}` (bash .ci/bootstrap does)"
    return None


pytestmark = pytest.mark.skipif(node_skip_reason() is not None, reason=node_skip_reason() or "")


def contract_events(seed: int = 14) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []
    for _ in range(80):
        follower, followee = rng.sample(USERS, 2)
        kind = "follow" if rng.random() < 0.7 else "unfollow"
        events.append({"type": kind, "follower": follower, "followee": followee})
    events.append({"type": "user_removed", "user": "u9"})
    posts: list[dict[str, Any]] = []
    for i in range(20):
        author = rng.choice(USERS)
        post = {"type": "post", "author": author, "post_id": f"p{i}", "ts": 1_700_000_000_000}
        posts.append({**post, "ts": post["ts"] + 1000 * (i // 2)})  # some ties: author, id
    gone = [{"type": "post_deleted", "author": p["author"], "post_id": p["post_id"]} for p in posts]
    # Three deletions of delivered posts: two after their posts, one before its post (it stays
    # deleted).
    return [*events, gone[19], *posts, gone[11], gone[15]]


DELETED = {"p11", "p15", "p19"}


def consume_both(runs: list[Settings], which: str) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "timeline_fanout", "consume", which, "--until-idle", "2"],
            env=settings_env(s),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for s in runs
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()


def outcome(settings: Settings) -> dict[str, Any]:
    store = wiring.edge_store(settings)
    lists = wiring.list_store(settings, store)
    refs = [ListRef(kind, u) for u in USERS for kind in (ListKind.FOLLOWERS, ListKind.FOLLOWING)]
    found = lists.read_many(refs)
    reader = wiring.timeline_reader(settings, store)
    return {
        "lists": {(r.kind.name, r.user): sorted(found[r]) for r in refs},
        "timelines": {u: reader.read(u) for u in USERS},
    }


def partitions(settings: Settings, events: list[dict[str, Any]]) -> dict[bytes, set[int]]:
    landed: dict[bytes, set[int]] = {}
    per_topic = Counter(settings.topics.for_event(validate_event(e)) for e in events)
    for topic, count in per_topic.items():
        for m in read_topic(settings.kafka, topic, count):
            landed.setdefault(m.key(), set()).add(m.partition())
    return landed


@pytest.mark.apache_kafka  # kafkajs's idempotent producer needs InitProducerId
def test_node_events_are_applied_exactly_as_python_ones(settings: Settings, tmp_path: Path) -> None:
    settings = settings.model_copy(update={"max_poll_interval_ms": 6000})  # a 3 s group join
    node_run = settings.model_copy(
        update={
            "topic_prefix": f"{settings.topic_prefix}n",
            "cache_prefix": f"{settings.cache_prefix}n",
            "group": f"{settings.group}n",
            "edge_store": f"sqlite:///{tmp_path / 'node-edges.db'}",
        }
    )
    create_topics(node_run.kafka, node_run.topics.all(), partitions=6)
    events = contract_events()

    with EventPublisher(settings.kafka, settings.topics) as publisher:
        for event in events:
            publisher.publish(event)
    lines = b"".join(orjson.dumps(e) + b"\n" for e in events)
    node = subprocess.run(
        ["node", str(NODE_DIR / "produce.js"), node_run.kafka, node_run.topic_prefix],
        input=lines,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert node.returncode == 0, node.stderr.decode() + node.stdout.decode()
    assert orjson.loads(node.stdout) == {"sent": len(events), "rejected": []}

    # One partitioner: every key on the same partition whichever client sent it.
    assert partitions(node_run, events) == partitions(settings, events)

    consume_both([settings, node_run], "graph")
    consume_both([settings, node_run], "fanout")
    python_side, node_side = outcome(settings), outcome(node_run)
    assert node_side == python_side
    assert sum(len(t) for t in python_side["timelines"].values()) > 20  # posts were delivered
    shown = {entry.post_id for t in python_side["timelines"].values() for entry in t}
    assert shown.isdisjoint(DELETED)  # and the deleted ones taken out
    assert read_topic(node_run.kafka, node_run.topics.dlq, 1, timeout=1) == []


def test_the_node_producer_refuses_what_python_refuses(settings: Settings) -> None:
    """ajv with the shipped schema, on the edge cases of issue 14."""
    bad = [
        {"type": "user_removed", "user": "u1", "v": True},
        {"type": "post", "author": "u1", "post_id": "p", "text": "\ud800"},
        {"type": "post", "author": "u1", "post_id": "p", "ts": 1.5},
        {
            "type": "fanout_task",
            "author": "a",
            "post_id": "p",
            "post_ts": 1,
            "chunk": 0,
            "followers": ["victim"],
        },
        {"type": "post_deleted", "author": "u1", "post_id": "p", "text": "why"},
        {"type": "post_deleted", "author": "u1"},
    ]
    lines = "".join(json.dumps(e) + "\n" for e in bad).encode()  # escapes the lone surrogate
    node = subprocess.run(
        ["node", str(NODE_DIR / "produce.js"), settings.kafka, settings.topic_prefix],
        input=lines,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert node.returncode == 1, node.stderr.decode()
    report = orjson.loads(node.stdout)
    assert report["sent"] == 0
    assert [r["line"] for r in report["rejected"]] == [1, 2, 3, 4, 5, 6]
