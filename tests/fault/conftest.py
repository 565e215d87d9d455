"""Fault-suite fixtures. Size: FANOUT_FAULT_EVENTS (events per scenario, default 2000) and
FANOUT_FAULT_KILLS (SIGKILLs per consumer, default 2); the summary line and the JSON report are
assembled by tests/fault/report.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fault.report import PROPERTY


@pytest.fixture
def fault_report(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """A scenario's figures (``harness.record`` adds to them); they leave on its teardown
    report, which reaches the process that prints the summary."""
    figures: dict[str, Any] = {}
    yield figures
    request.node.user_properties.append((PROPERTY, figures))
