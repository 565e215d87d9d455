"""Robustness under load, not speed: minutes of mixed reads (HTTP), follows, unfollows and posts
(``POST /v1/events``) with both consumers running as processes and memcached servers restarted
(each down a few seconds) during the run. Asserts that the API answered nothing 5xx but 503
(``Retry-After``) and that, once the consumers caught up, every list and timeline is exact,
read in-process (tests/fault/harness.py ``compare``) and through the API.

Long, so off by default: ``FANOUT_LOAD_MINUTES=10`` runs it for ten minutes (fractions work:
0.5 is a 30-second smoke run). Figures go to the fault summary (tests/fault/report.py).
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.support.server import api_server
from tests.fault.api_client import READ_LIMIT, Client, through_the_api
from tests.fault.harness import ConsumerProcess, Model, compare, fault_settings, record
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph.timelines.reader import TimelineEntry
from timeline_fanout_devstack import stack

MINUTES = float(os.environ.get("FANOUT_LOAD_MINUTES", "0") or 0)
USERS = 60
READERS = 4
BATCH = 20  # events per POST
OUTAGE_EVERY_S = min(30.0, MINUTES * 60 / 3)  # at least two outages in any run
DOWN_FOR_S = 3.0
GRACE_S = 2.0  # after a restart, in-flight requests may still see the outage

pytestmark = pytest.mark.skipif(
    MINUTES <= 0, reason="load test: set FANOUT_LOAD_MINUTES (e.g. 10) to run it"
)


@dataclass
class Traffic:
    """What the clients saw, shared by their threads (counters under one lock)."""

    statuses: Counter[str] = field(default_factory=Counter)
    outages: list[tuple[float, float]] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    events: int = 0  # acknowledged
    lock: threading.Lock = field(default_factory=threading.Lock)

    def saw(self, what: str, status: int, at: float, detail: str = "") -> None:
        with self.lock:
            self.statuses[f"{what} {status}"] += 1
            if status >= 500 and status != 503:
                self.unexpected.append(f"{what} {status} {detail[:200]}")
            if status == 503 and not self.in_outage(at):
                self.statuses["503 outside an outage"] += 1

    def in_outage(self, at: float) -> bool:
        return any(start <= at <= end + GRACE_S for start, end in self.outages)


def write(base: str, model: Model, traffic: Traffic, stop: threading.Event) -> None:
    """Batches of follows (with re-follows), unfollows and posts, each event with its own id
    and time, so that a retried batch is the same events (docs/http-api.md, Publishing). The model
    records a batch once it is acknowledged."""
    client, rng, i = Client(base), random.Random(13), 0
    names = sorted(model.users)
    while not stop.is_set():
        events: list[dict[str, Any]] = []
        for _ in range(BATCH):
            i += 1
            base_event = {"event_id": uuid.uuid4().hex, "ts": time.time_ns() // 1_000_000}
            if rng.random() < 0.2:
                author = names[min(int(rng.expovariate(0.15)), USERS - 1)]
                events.append({"type": "post", "author": author, "post_id": f"p{i}"} | base_event)
                continue
            follower = rng.choice(names)
            followee = names[min(int(rng.expovariate(0.1)), USERS - 1)]
            if follower != followee:
                kind = "follow" if rng.random() < 0.7 else "unfollow"
                pair = {"follower": follower, "followee": followee}
                events.append({"type": kind, **pair} | base_event)
        body = orjson.dumps(events)
        while True:  # the broker stays up: a refusal is retried, and counted
            status, answer = client.call("POST", "/v1/events", body)
            traffic.saw(
                "POST /v1/events", status, time.monotonic(), answer.decode(errors="replace")
            )
            if status == 202:
                break
            time.sleep(0.5)
        traffic.events += len(events)  # this thread's alone
        for event in events:
            if event["type"] == "post":
                model.posts.append(TimelineEntry(event["ts"], event["author"], event["post_id"]))
            else:
                model.edges[(event["follower"], event["followee"])] = event["type"] == "follow"
        stop.wait(0.1)


def read(base: str, traffic: Traffic, stop: threading.Event, seed: int) -> None:
    client, rng = Client(base), random.Random(seed)
    while not stop.is_set():
        user = f"u{rng.randrange(USERS)}"
        route = rng.choice(("timeline", "timeline", "followers", "following"))
        path = (
            f"/v1/timelines/{user}?limit={READ_LIMIT}"
            if route == "timeline"
            else f"/v1/users/{user}/{route}?limit=1000"
        )
        status, answer = client.call("GET", path)
        # A user nobody has followed or been followed by yet is a 404: fine early on.
        traffic.saw(f"GET {route}", status, time.monotonic(), answer.decode(errors="replace"))


def restart_memcached(traffic: Traffic, stop: threading.Event) -> None:
    which = 0
    while not stop.wait(OUTAGE_EVERY_S):
        with traffic.lock:  # open-ended while it lasts: readers check it as they go
            traffic.outages.append((time.monotonic(), float("inf")))
        stack.restart_memcached(f"memcached{which % stack.MEMCACHED_SERVERS}", DOWN_FOR_S)
        with traffic.lock:
            traffic.outages[-1] = (traffic.outages[-1][0], time.monotonic())
        which += 1


def test_mixed_load_with_memcached_restarts_answers_only_503_and_ends_exact(
    settings: Settings, fault_report: dict[str, Any], tmp_path: Path
) -> None:
    settings = fault_settings(settings)
    model = Model(cap=settings.timeline_max, users={f"u{i}" for i in range(USERS)})
    traffic = Traffic()
    consumers = [ConsumerProcess(settings, which, tmp_path) for which in ("graph", "fanout")]
    stop = threading.Event()
    try:
        with api_server(settings, log=tmp_path / "serve.log") as base:
            threads = [
                threading.Thread(target=write, args=(base, model, traffic, stop)),
                threading.Thread(target=restart_memcached, args=(traffic, stop)),
                *(
                    threading.Thread(target=read, args=(base, traffic, stop, seed))
                    for seed in range(READERS)
                ),
            ]
            for thread in threads:
                thread.start()
            stop.wait(MINUTES * 60)
            stop.set()
            for thread in threads:
                thread.join(60)
            for consumer in consumers:
                consumer.finish()
            found = compare(settings, model)
            found.update(through_the_api(base, model))
    finally:
        for consumer in consumers:
            consumer.kill()
    outage_s = sum(end - start for start, end in traffic.outages)
    requests = sum(n for key, n in traffic.statuses.items() if key[0] in "GP")
    record(
        fault_report,
        {
            "events": traffic.events,
            "memcached_restarts": len(traffic.outages),
            "load_outage_s": round(outage_s),  # summed; the summary's outage_s is the longest
            "http_requests": requests,
            "http_503": sum(n for key, n in traffic.statuses.items() if key.endswith(" 503")),
            "http_503_outside_outages": traffic.statuses["503 outside an outage"],
            "consumer_crashes": sum(c.crashes for c in consumers),
            **found,
        },
    )
    (tmp_path / "traffic.json").write_bytes(
        orjson.dumps({"statuses": traffic.statuses, "found": found, "outage_s": outage_s})
    )
    assert traffic.unexpected == [], traffic.unexpected[:10]
    assert sum(c.crashes for c in consumers) == 0
    assert traffic.outages, "the run was too short for a memcached restart"
    assert sum(found.values()) == 0, dict(found)
