"""A live corner of the stack for the API's end-to-end tests: events published to the test's
topics and applied by the real consumers (the loops ``fanout consume`` runs, here in threads),
waited for through the consumer groups' committed offsets, as ``/v1/stats`` reads them (a run
``--until-idle`` would wait a session timeout first)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from timeline_fanout.api.consumer_lag import ConsumerLag
from timeline_fanout.cli import wiring
from timeline_fanout.cli.api_server import watched_groups
from timeline_fanout.cli.settings import Settings
from timeline_fanout.consumers import ConsumeLoop


def publish(settings: Settings, events: Iterable[Mapping[str, Any]]) -> None:
    with wiring.publisher(settings) as publisher:
        for event in events:
            publisher.publish(event)


def committed(settings: Settings) -> dict[str, int]:
    lag = ConsumerLag(settings.kafka, watched_groups(settings), settings.kafka_config, 5.0)
    try:
        return {c["consumer"]: c["committed"] for c in lag.snapshot()["consumers"]}
    finally:
        lag.close()


def consume(settings: Settings, graph: int, posts: int, timeout: float = 60) -> None:
    """Runs both consumers until ``graph`` graph events and ``posts`` posts (counted from the
    start of the topics) are applied and committed."""
    stop = threading.Event()

    def run(build: Callable[[Settings, threading.Event], ConsumeLoop]) -> None:
        loop = build(settings, stop)  # in its thread: a SQLite connection stays in its own
        try:
            loop.run()
        finally:
            loop.source.close()

    threads = [
        threading.Thread(target=run, args=(build,))
        for build in (wiring.graph_loop, wiring.fanout_loop)
    ]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + timeout
        while (done := committed(settings))["graph"] < graph or done["fanout"] < posts:
            assert time.monotonic() < deadline, f"consumers applied only {done}"
            time.sleep(0.2)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
