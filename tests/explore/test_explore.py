"""The interleaving explorer as a test (see tests/explore/explorer.py and FINDINGS.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from graph.cache import MemcacheCluster
from tests.explore.explorer import Schedule, explore, run_schedule


def _print(run: Schedule) -> None:
    print(run.report())


# Today's graph layer is known to break these invariants (tests/explore/FINDINGS.md): on this
# branch only, the explorer is an expected failure so that CI stays green while it documents
# them. Once the redesign lands, drop the xfail: it becomes a plain assertion.
@pytest.mark.xfail(strict=False, reason="known races in today's graph layer, see FINDINGS.md")
def test_random_schedules_leave_every_list_equal_to_the_store(cache: MemcacheCluster) -> None:
    shown: set[str] = set()

    def show_first_of_each_kind(run: Schedule) -> None:
        kinds = {f.kind for f in run.failures} - shown
        if kinds:
            shown.update(kinds)
            _print(run)

    report = explore(cache, on_failure=show_first_of_each_kind)
    print(report.summary())
    assert not report.failed, report.summary()


@pytest.mark.skipif("FANOUT_EXPLORE_SEED" not in os.environ, reason="set FANOUT_EXPLORE_SEED")
def test_replay_one_seed(cache: MemcacheCluster, tmp_path: Path) -> None:
    scenario, _, seed = os.environ["FANOUT_EXPLORE_SEED"].partition(":")
    run = run_schedule(cache, tmp_path, scenario, int(seed))
    print(run.report(limit=10_000))
    assert not run.failures
