"""`fanout demo`, the README's main job, run as a user runs it, on the test stack."""

from __future__ import annotations

import re

import pytest

from tests.conftest import run_cli
from timeline_fanout.cli.settings import Settings
from timeline_fanout_devstack.home import fanout_home


@pytest.mark.tansu_smoke
def test_the_demo_delivers_into_cached_timelines_and_checks_every_timeline(
    settings: Settings,
) -> None:
    before = sorted(fanout_home().glob("*.db*"))
    done = run_cli(
        settings, "demo", "--users", "120", "--events", "1500", "--posts", "300", timeout=300
    )
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()
    assert "timelines checked against the edge store: 120, mismatched: 0" in out
    delivery = re.search(r"(\d+) deliveries appended .* (\d+) skipped", out.replace("\n", " "))
    assert delivery is not None, out
    appended, skipped = int(delivery[1]), int(delivery[2])
    assert appended > 0 and skipped > 0  # half the users read first: both paths walked
    assert "most followed" in out
    # Two latencies, each named for what it measures: a lone post, and the burst's queueing.
    flat = " ".join(out.split())  # the console wraps lines at its width
    assert re.search(
        r"idle pipeline \(publish to delivered\): p50 [\d,]+ ms, max [\d,]+ ms over 5 posts", flat
    ), out
    assert re.search(
        r"the 300 posts published in one burst, .*queued.*: p50 [\d,]+ ms, p99", flat
    ), out
    assert sorted(fanout_home().glob("*.db*")) == before  # its sandbox is gone
