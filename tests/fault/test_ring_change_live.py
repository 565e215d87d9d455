"""A fourth memcached server taken into use and removed again by `fanout ring change`, with
both consumers and the API running and apps reading throughout (docs/design/ring-change.md).

Events are published while each change runs; every process switches ring state at its own
moment (each reads the record when its own lease runs out). After each change every user's
followers, following and timeline are read through the API until they equal the model; after
the reversal the consumers stop and everything is compared in-process as well: no append was
lost, and no copy left on the three servers while its keys lived on the fourth is served."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path
from typing import Any

from bench.support.server import api_server
from tests.conftest import run_cli
from tests.fault.api_client import through_the_api
from tests.fault.harness import (
    SIZE,
    ConsumerProcess,
    Model,
    compare,
    fault_settings,
    publish_mix,
    record,
)
from tests.fault.test_cache_server_outage import Readers, exact_through_the_api
from timeline_fanout.cli import wiring
from timeline_fanout.cli.settings import Settings
from timeline_fanout_devstack.memcached_processes import own_server

EVENTS = SIZE // 5  # per change, of FANOUT_FAULT_EVENTS (default 2000)
USERS = 40
RING_LEASE_S = 1.0  # a hold of about 4 s: changes short enough for the suite


def change(settings: Settings, servers: list[str], done: list[int]) -> threading.Thread:
    """`fanout ring change` run in the background; its exit status lands in ``done``."""

    def run() -> None:
        finished = run_cli(settings, "ring", "change", *servers, timeout=300)
        done.append(finished.returncode)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_server_added_and_removed_live_keeps_every_page_and_list_exact(
    settings: Settings, fault_report: dict[str, Any], tmp_path: Path
) -> None:
    settings = fault_settings(settings).model_copy(update={"ring_lease_s": RING_LEASE_S})
    three = [f"{host}:{port}" for host, port in settings.memcached_servers]
    model = Model(cap=settings.timeline_max)
    consumers = [ConsumerProcess(settings, which, tmp_path) for which in ("graph", "fanout")]
    wrong: dict[str, int] = {}
    exits: list[int] = []
    seeds = itertools.count()
    published = 0
    try:
        with (
            own_server() as (_, (host, port)),
            api_server(settings, log=tmp_path / "serve.log") as base,
            Readers(base, count=2) as readers,
            wiring.publisher(settings) as publisher,
        ):
            publish_mix(publisher, model, EVENTS, seed=next(seeds), users=USERS)
            publisher.flush()
            published += EVENTS
            wrong["before"] = sum(exact_through_the_api(base, model).values())
            for phase, servers in (("grown", [*three, f"{host}:{port}"]), ("shrunk", three)):
                readers.phase = phase
                running = change(settings, servers, exits)
                while running.is_alive():  # events flow while processes switch
                    publish_mix(publisher, model, EVENTS // 10, seed=next(seeds), users=USERS)
                    publisher.flush()
                    published += EVENTS // 10
                    running.join(0.5)
                wrong[phase] = sum(exact_through_the_api(base, model).values())
            for consumer in consumers:
                consumer.finish()
            found = compare(settings, model)
            after = sum(through_the_api(base, model).values())
    finally:
        for consumer in consumers:
            consumer.kill()
    record(
        fault_report,
        {
            "events": published,
            "ring_changes": len(exits),
            "consumer_crashes": sum(c.crashes for c in consumers),
            **{f"api_wrong_{phase}": n for phase, n in wrong.items()},
            **found,
        },
    )
    assert exits == [0, 0]
    assert wrong == {"before": 0, "grown": 0, "shrunk": 0}
    assert sum(found.values()) == 0, dict(found)
    assert after == 0
    assert sum(c.crashes for c in consumers) == 0
    assert readers.statuses, "the readers read nothing"
