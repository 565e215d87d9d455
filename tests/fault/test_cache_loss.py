"""Cache loss mid-run: a flush of every server, a crashed-and-restarted server, a server that
stays down for a while, and a server hung (SIGSTOP) for a while that then goes on with the items
it held. Lists and timelines must be rebuilt, never left short, and never served stale."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fault.harness import MONGO_STORES, SIZE, compare, fault_settings, record, run_under_fault
from timeline_fanout.cli import wiring
from timeline_fanout.cli.settings import Settings
from timeline_fanout_devstack import stack

FAULTS: dict[str, tuple[Callable[[Settings], None], dict[str, int]]] = {
    "flush_all": (
        lambda s: wiring.list_store(s, wiring.edge_store(s)).cache.flush_all(),
        {"cache_flushes": 1},
    ),
    "restart_one_server": (
        lambda _s: stack.restart_memcached("memcached0"),
        {"memcached_restarts": 1},
    ),
    "one_server_down_for_4s": (
        lambda _s: stack.restart_memcached("memcached1", down_for=4.0),
        {"memcached_restarts": 1},
    ),
    "one_server_hung_for_4s": (
        lambda _s: stack.hang_memcached("memcached1", 4.0),
        {"memcached_hangs": 1},
    ),
}


@pytest.mark.edge_stores("sqlite", *MONGO_STORES)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_cache_loss_mid_run_leaves_exact_lists_and_timelines(
    settings: Settings, fault_report: dict[str, Any], tmp_path: Path, fault: str
) -> None:
    settings = fault_settings(settings)
    inject, counts = FAULTS[fault]
    model, consumers = run_under_fault(settings, tmp_path, lambda: inject(settings), seed=3)
    found = compare(settings, model)
    retries = sum(c.retries() for c in consumers)
    record(
        fault_report,
        {
            "events": SIZE,
            "removals": model.removals,
            **counts,
            "retries": retries,
            "consumer_crashes": sum(c.crashes for c in consumers),
            **found,
        },
    )
    assert sum(c.crashes for c in consumers) == 0
    assert sum(found.values()) == 0, dict(found)
