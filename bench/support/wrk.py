"""Load from ``wrk`` (Debian's package; a load generator nobody here wrote): GETs over a list of
paths, walked in order from a different offset per wrk thread, with the figures reported by the
script's ``done`` hook as one JSON line (requests, duration, p50/p99 in microseconds, errors)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

SCRIPT = """
local paths = {%(paths)s}
local threads = 0
function setup(thread)
  thread:set("offset", threads * 7919)
  threads = threads + 1
end
local counter = 0
function init(args)
  counter = offset or 0
end
function request()
  counter = counter + 1
  return wrk.format("GET", paths[(counter %% #paths) + 1])
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '\\nWRK-JSON {"requests":%%d,"duration_us":%%d,"p50_us":%%d,"p99_us":%%d,'
    .. '"max_us":%%d,"non_2xx":%%d,"socket_errors":%%d}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    latency.max, e.status, e.connect + e.read + e.write + e.timeout))
end
"""


class WrkError(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class WrkResult:
    connections: int
    requests: int
    per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    non_2xx: int
    socket_errors: int


def wrk_binary() -> str:
    found = shutil.which("wrk")
    if found is None:
        raise WrkError("wrk is not installed: apt-get install -y wrk (.ci/bootstrap does)")
    return found


def run_wrk(base: str, paths: Sequence[str], connections: int, seconds: float) -> WrkResult:
    """``connections`` open at once over ``min(2, connections)`` wrk threads (the machine has 2
    cores, shared with the server)."""
    quoted = ",".join(orjson.dumps(p).decode() for p in paths)
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "paths.lua"
        script.write_text(SCRIPT % {"paths": quoted})
        done = subprocess.run(
            [
                wrk_binary(),
                f"-t{min(2, connections)}",
                f"-c{connections}",
                f"-d{max(1, round(seconds))}s",
                "--timeout",
                "5s",
                "-s",
                str(script),
                base,
            ],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
            check=False,
        )
    line = next((x for x in done.stdout.splitlines() if x.startswith("WRK-JSON ")), None)
    if done.returncode != 0 or line is None:
        raise WrkError(f"wrk failed ({done.returncode}): {done.stderr.strip() or done.stdout}")
    raw = orjson.loads(line.removeprefix("WRK-JSON "))
    return WrkResult(
        connections=connections,
        requests=raw["requests"],
        per_s=round(raw["requests"] / (raw["duration_us"] / 1e6), 1),
        p50_ms=round(raw["p50_us"] / 1000, 3),
        p99_ms=round(raw["p99_us"] / 1000, 3),
        max_ms=round(raw["max_us"] / 1000, 3),
        non_2xx=raw["non_2xx"],
        socket_errors=raw["socket_errors"],
    )
