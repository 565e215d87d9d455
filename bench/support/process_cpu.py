"""CPU time of processes, read from /proc: what a benchmark's work cost each process of the
stack (this one, the broker, each memcached), beside the wall clock it took."""

from __future__ import annotations

import contextlib
from pathlib import Path


def process_cpu_s(pid: int) -> float:
    """CPU time of every thread of the process, in ns resolution: the first field of each
    thread's /proc schedstat (clock ticks in /proc/PID/stat are 10 ms, coarser than a page).
    A thread that ended before the call is not counted: measure processes whose threads live
    as long as the measurement (servers, a consumer)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a thread ended
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9
