"""A small run of every benchmark so that none of them rots (no timing is asserted)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from bench.__main__ import BENCHMARKS, main


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_benchmark_smoke_run_writes_figures_and_a_plot(
    name: str, tmp_path: Path, local_stack: object, restored_gc: None
) -> None:
    assert main([name, "--quick", "--out", str(tmp_path)]) == 0
    doc = orjson.loads((tmp_path / f"{name}.json").read_bytes())
    assert doc["benchmark"] == name and doc["quick"] is True and doc["rows"]
    assert doc["machine"]["cpus"] >= 1 and doc["peak_rss_mib"] > 0
    assert (tmp_path / f"{name}.png").stat().st_size > 1000
