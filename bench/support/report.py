"""Writing a benchmark's figures: JSON for machines, a PNG bar chart for people."""

from __future__ import annotations

import os
import platform
import resource
import statistics
import subprocess
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


def checkout(source: Path, results: Path) -> dict[str, Any]:
    """The commit of the checkout ``source`` (a benchmark's file) is in, so a figure can be
    traced to the code it measured.

    ``commit`` is ``git rev-parse --short HEAD``; ``dirty`` is true when tracked files differ
    from it, ``results`` aside (earlier runs rewrite their JSON there, which changes no measured
    code). Both are ``None`` when git is missing or ``source`` is not tracked by a repository
    (an unpacked tree, or one unpacked inside some other repository): the benchmarks still run,
    and the figures say the commit was not recorded.
    """
    here = source.resolve()

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(here.parent), *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return done.stdout.strip()

    try:
        git("ls-files", "--error-unmatch", here.name)
        commit = git("rev-parse", "--short", "HEAD")
        top = Path(git("rev-parse", "--show-toplevel")).resolve()
        ignored = []
        if results.resolve().is_relative_to(top):
            ignored = [f":(top,exclude){results.resolve().relative_to(top).as_posix()}"]
        changes = git("status", "--porcelain", "--untracked-files=no", "--", ":/", *ignored)
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": bool(changes)}


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
            **checkout(Path(__file__), self.out),
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
