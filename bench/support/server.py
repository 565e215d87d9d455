"""A ``fanout serve`` process for a run (benchmark or load test): started with the run's
settings on a free loopback port, ready once ``/healthz`` answers, stopped (SIGTERM, then
SIGKILL) when the block ends."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from timeline_fanout.cli.settings import Settings, environment
from timeline_fanout_devstack.ports import free_port


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status) == 200
    except OSError:
        return False


@dataclass(frozen=True, slots=True)
class Served:
    base: str  # http://127.0.0.1:PORT
    pid: int  # the server's process (with --workers 1, the one that answers)


@contextlib.contextmanager
def api_server(
    settings: Settings, *args: str, log: Path | None = None, **env: str
) -> Iterator[str]:
    """Yields the base URL. ``args`` go to ``fanout serve``; ``env`` adds variables (e.g.
    ``FANOUT_API_THREADS``)."""
    with api_process(settings, *args, log=log, **env) as served:
        yield served.base


@contextlib.contextmanager
def api_process(
    settings: Settings, *args: str, log: Path | None = None, **env: str
) -> Iterator[Served]:
    """``api_server``, also naming the process (for its CPU time)."""
    port = free_port()
    out = log.open("ab") if log is not None else subprocess.DEVNULL
    process = subprocess.Popen(
        [sys.executable, "-m", "timeline_fanout", "serve", "--port", str(port), *args],
        env=environment(settings) | env,
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not answers(f"{base}/healthz"):
            if process.poll() is not None:
                raise RuntimeError(f"fanout serve exited with {process.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError("fanout serve did not answer /healthz within 60 s")
            time.sleep(0.1)
        yield Served(base, process.pid)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if log is not None:
            out.close()  # type: ignore[union-attr]
