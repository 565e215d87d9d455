"""``fanout verify``: anti-entropy on the real stack, through the CLI."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import run_cli
from timeline_fanout.cli import wiring
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph import EdgeChange, ListKind, ListRef


def test_verify_finds_exports_and_repairs_divergence(settings: Settings, tmp_path: Path) -> None:
    store = wiring.edge_store(settings)
    store.apply([EdgeChange(f"f{i}", "star", True, i) for i in range(20)])
    reader = wiring.timeline_reader(settings, store)
    users = ["star", *(f"f{i}" for i in range(20))]
    reader.follow_lists.read_many(
        [ListRef(k, u) for u in users for k in (ListKind.FOLLOWERS, ListKind.FOLLOWING)]
    )
    reader.timelines.read_many([ListRef(ListKind.TIMELINE, u) for u in users])

    clean = run_cli(settings, "verify", "--sample", "100")
    assert clean.returncode == 0, clean.stdout.decode() + clean.stderr.decode()
    assert "followers: checked 21, not cached 0, divergent 0" in clean.stdout.decode()

    # A divergence the store does not have (what a bug or a lost write would leave behind).
    reader.follow_lists.apply({ListRef(ListKind.FOLLOWERS, "star"): [(True, "ghost", 99)]})
    metrics = tmp_path / "verify.prom"
    found = run_cli(settings, "verify", "--metrics-file", str(metrics), *users)
    out = found.stdout.decode()
    assert found.returncode == 1, out
    assert "followers: checked 21, not cached 0, divergent 1, repaired 0" in out
    assert "star: extra ['ghost']" in out
    samples = {
        (s.name, s.labels.get("kind")): s.value
        for family in text_string_to_metric_families(metrics.read_text())
        for s in family.samples
    }
    assert samples[("fanout_verify_divergent", "followers")] == 1
    assert samples[("fanout_verify_checked", "timeline")] == 21

    repaired = run_cli(settings, "verify", "--repair", "star")
    assert repaired.returncode == 0 and "divergent 1, repaired 1" in repaired.stdout.decode()
    assert reader.follow_lists.read(ListRef(ListKind.FOLLOWERS, "star")) == {
        f"f{i}" for i in range(20)
    }
    again = run_cli(settings, "verify", "star")
    assert again.returncode == 0 and "not cached 0, divergent 0" in again.stdout.decode()


def test_a_sampled_verify_reaches_users_whose_last_edge_went_away(settings: Settings) -> None:
    """b's only follower unfollowed: b has no active edge, but a stale cached list of b (a
    resurrected follower) must still be sampled, not only checked when named."""
    store = wiring.edge_store(settings)
    store.apply([EdgeChange("a", "b", True, 1), EdgeChange("a", "b", False, 2)])
    lists = wiring.list_store(settings, store)
    ref = ListRef(ListKind.FOLLOWERS, "b")
    lists.read_many([ref])
    lists.apply({ref: [(True, "a", 1)]})  # a late addition with no read-back (a zombie's)
    found = run_cli(settings, "verify", "--sample", "100")
    assert found.returncode == 1, found.stdout.decode()
    assert "b: extra ['a']" in found.stdout.decode()
