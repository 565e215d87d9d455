"""The fault suite writes its figures to a JSON report and one summary line.

Size: FANOUT_FAULT_EVENTS (events per scenario, default 2000) and FANOUT_FAULT_KILLS (SIGKILLs
per consumer, default 2). Report: FANOUT_FAULT_REPORT (default ./fault-report.json).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.fault.harness import FIGURES, TOTALS


@pytest.fixture
def fault_report(request: pytest.FixtureRequest) -> dict[str, Any]:
    """A test's figures; merged into the report when the session ends."""
    figures: dict[str, Any] = {}
    FIGURES[request.node.name] = figures
    return figures


SUMMARY_KEYS = [
    "events",
    "kills",
    "cache_flushes",
    "memcached_restarts",
    "removals",
    "replays_over_live",
    "outage_s",
    "kicked",
    "member_changes",
    "lost",
    "resurrected",
    "edge_divergent",
    "list_truncated",
    "timeline_missing",
    "timeline_wrong",
    "acked_not_stored",
    "consumer_crashes",
]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not FIGURES:
        return
    parts = [f"{key}={TOTALS.get(key, 0)}" for key in SUMMARY_KEYS]
    parts.insert(-1, f"dlq={TOTALS.get('dlq', 0)}/{TOTALS.get('dlq_expected', 0)}")
    line = " ".join(parts)
    path = Path(os.environ.get("FANOUT_FAULT_REPORT", "fault-report.json"))
    path.write_bytes(
        orjson.dumps(
            {"summary": line, "totals": TOTALS, "scenarios": FIGURES}, option=orjson.OPT_INDENT_2
        )
    )
    terminalreporter.write_line(f"fault suite: {line}")
    terminalreporter.write_line(f"fault report: {path.resolve()}")
