"""The fault suite's one summary line and JSON report, assembled from test reports.

Scenarios record their figures in the worker process that runs them; with pytest-xdist that is
not the process that prints the summary. So each scenario's figures travel on its teardown
report (``user_properties``, which xdist serialises to the controller) and the controller, or the
single process without xdist, sums them here. Registered by the root conftest, because xdist's
controller never collects ``tests/fault`` and so never loads its conftest.

Report: FANOUT_FAULT_REPORT (default ./fault-report.json).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

PROPERTY = "fault_figures"
SUMMARY_KEYS = [
    "events",
    "kills",
    "broker_kills",
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
    "count_wrong",
    "list_truncated",
    "timeline_missing",
    "timeline_wrong",
    "deleted_shown",
    "acked_not_stored",
    "consumer_crashes",
]
_SCENARIOS: dict[str, dict[str, Any]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "teardown":
        return
    for name, figures in report.user_properties:
        if name == PROPERTY:
            _SCENARIOS[report.nodeid.rsplit("::", 1)[-1]] = figures


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _SCENARIOS:
        return
    totals: Counter[str] = Counter()
    for figures in _SCENARIOS.values():
        totals.update({k: v for k, v in figures.items() if isinstance(v, int)})
    parts = [f"{key}={totals.get(key, 0)}" for key in SUMMARY_KEYS]
    parts.insert(-1, f"dlq={totals.get('dlq', 0)}/{totals.get('dlq_expected', 0)}")
    line = " ".join(parts)
    path = Path(os.environ.get("FANOUT_FAULT_REPORT", "fault-report.json"))
    report = {"summary": line, "totals": totals, "scenarios": dict(sorted(_SCENARIOS.items()))}
    path.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    terminalreporter.write_line(f"fault suite: {line}")
