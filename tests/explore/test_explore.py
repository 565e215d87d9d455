"""The interleaving explorer as a test (see tests/explore/explorer.py and docs/testing.md)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from tests.explore.explorer import SCENARIOS, Schedule, explore, is_fault, run_schedule
from timeline_fanout.memcache.cluster import MemcacheCluster


def _print(run: Schedule) -> None:
    print(run.report())


def _faulted_runs(
    cache: MemcacheCluster, tmp_path: Path, seeds: int, **shares: float
) -> Counter[str]:
    """Every scenario's first ``seeds`` schedules with the given shares of faults, asserted to
    end exactly; the fault steps they took, counted by kind."""
    failed: list[str] = []
    faults: Counter[str] = Counter()
    for scenario in SCENARIOS:
        for seed in range(seeds):
            run = run_schedule(cache, tmp_path, scenario, seed, **shares)
            faults.update(s.call for s in run.steps if is_fault(s))
            if run.failures:
                failed.append(run.report())
    assert not failed, "\n\n".join(failed)
    return faults


# An unfenced design breaks these invariants (docs/testing.md lists how); the fenced design
# must not: a plain assertion.
def test_random_schedules_leave_lists_equal_to_the_store_and_timelines_as_the_events_say(
    cache: MemcacheCluster,
) -> None:
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


def test_a_seed_replays_identically(cache: MemcacheCluster, tmp_path: Path) -> None:
    """The whole point of a seed: the same schedule, step for step, every time it runs (and
    in another session: nothing in it depends on ports, hash seeds or the clock)."""
    for scenario in SCENARIOS:
        for seed in (3, 4):
            first = run_schedule(cache, tmp_path, scenario, seed)
            again = run_schedule(cache, tmp_path, scenario, seed)
            assert first.trace == again.trace
            assert [str(f) for f in first.failures] == [str(f) for f in again.failures]
            assert len(first.trace) > 20


def test_serial_schedules_find_nothing(cache: MemcacheCluster, tmp_path: Path) -> None:
    """The explorer itself raises no false alarms: the same workloads (duplicates, replays,
    zombies, evictions, restarts, invalidations, cache servers cut off or restarted) with the
    actors run one after the other leave every list equal to the store. Crashes between store
    and lists are left out: with a removal that is not idempotent, a redelivered removal
    breaks lists even without concurrency (removal-not-idempotent in docs/testing.md)."""
    failed = []
    for scenario in SCENARIOS:
        for seed in range(6):
            run = run_schedule(cache, tmp_path, scenario, seed, strategy="serial", crashes=False)
            if run.failures:
                failed.append(run.report())
    assert not failed, "\n\n".join(failed)


def test_processes_cut_off_a_cache_server_or_a_server_restarted_empty_are_never_served_stale(
    cache: MemcacheCluster, tmp_path: Path
) -> None:
    """Every schedule with cache-server faults (memcache/trust.py): a process cut off a server
    skips its writes there and revokes its epoch while the others keep using the server, which
    keeps its items, stale for the writes it missed; a server is down for everyone; a server is
    restarted empty, with the epochs it kept for others. Lists and timelines must still end
    exactly as the store and the events say, read by a process that never saw any of it."""
    faults = _faulted_runs(cache, tmp_path, 4, server_faults=1.0)
    assert faults["fault.cut"] >= 10 and faults["fault.server-restart"] >= 1, faults


def test_a_seed_with_cache_server_faults_replays_identically(
    cache: MemcacheCluster, tmp_path: Path
) -> None:
    """Cuts, heals, retries and leases run on the schedule's virtual clock and servers are
    placed by name, not port: a seed with server faults replays step for step too."""
    cuts = 0
    for scenario in ("graph", "timeline"):
        for seed in (6, 7):
            first = run_schedule(cache, tmp_path, scenario, seed, server_faults=1.0)
            again = run_schedule(cache, tmp_path, scenario, seed, server_faults=1.0)
            cuts += sum(s.call == "fault.cut" for s in first.steps)
            assert first.trace == again.trace
    assert cuts


def test_lists_and_timelines_stay_exact_through_live_ring_changes_back_to_back(
    cache: MemcacheCluster, tmp_path: Path
) -> None:
    """Every schedule with live ring changes (memcache/ring_change.py), one to three back to
    back, each adding or removing one or two servers (new ones, or one of the first three, or
    one that left before), while writers, readers and faults run; each process switches state
    when its own lease on the record runs out, so processes are in neighbouring states at
    once, and writers wait while their keys move. Lists and timelines must end exactly as the
    store and the events say."""
    faults = _faulted_runs(cache, tmp_path, 3, ring_changes=1.0)
    # Every change swaps the record twice (moving, then stable), some twice over.
    assert faults["fault.ring"] >= 2 * len(SCENARIOS) * 3, faults


def test_writers_stopped_mid_batch_past_a_hold_or_failing_a_write_no_round_retries(
    cache: MemcacheCluster, tmp_path: Path
) -> None:
    """Every schedule with writers stopped inside an exchange (tests/explore/adapter.py,
    ``Stall``): after the batch's edge-store write, at a timeline invalidation or another
    DELETE, for up to two holds while ring changes, revocations and hung servers go on, or
    with that request failing (a write no later round of the batch makes again). Each
    exchange's requests go on as placed when the writer resumes; the product must check them
    against the record and revoke what they missed: lists and timelines end exactly."""
    faults = _faulted_runs(cache, tmp_path, 3, stalls=1.0, ring_changes=0.5)
    assert faults["fault.stall"] >= len(SCENARIOS) and faults["fault.cut"] >= 10, faults
