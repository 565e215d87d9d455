"""Writing a benchmark's figures: JSON for machines, a PNG bar chart for people."""

from __future__ import annotations

import os
import platform
import resource
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

Row = dict[str, Any]  # one line of figures


def machine() -> dict[str, Any]:
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return {
        "cpus": os.cpu_count(),
        "cpu": model,
        "memory_gib": round(pages / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def peak_rss_mib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def percentiles(samples_s: list[float]) -> dict[str, float]:
    ordered = sorted(samples_s)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[min(int(len(ordered) * 0.99), len(ordered) - 1)] * 1000, 3),
    }


def timed(fn: Any, repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return samples


@dataclass
class Report:
    name: str
    out: Path
    quick: bool
    rows: list[dict[str, Any]] = field(default_factory=list)

    def add(self, **row: Any) -> None:
        self.rows.append(row)
        print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)

    def write(self, bars: list[tuple[str, float]], ylabel: str) -> Path:
        self.out.mkdir(parents=True, exist_ok=True)
        doc = {
            "benchmark": self.name,
            "quick": self.quick,
            "machine": machine(),
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "peak_rss_mib": peak_rss_mib(),
            "rows": self.rows,
        }
        path = self.out / f"{self.name}.json"
        path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        self._plot(bars, ylabel)
        return path

    def _plot(self, bars: list[tuple[str, float]], ylabel: str) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(max(6, len(bars) * 1.2), 4))
        ax.bar([label for label, _ in bars], [value for _, value in bars], color="#4c72b0")
        ax.set_ylabel(ylabel)
        ax.set_title(self.name)
        ax.tick_params(axis="x", labelrotation=30)
        fig.tight_layout()
        fig.savefig(self.out / f"{self.name}.png", dpi=100)
        plt.close(fig)
