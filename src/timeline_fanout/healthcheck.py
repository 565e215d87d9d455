"""The container healthcheck: every consumer of this ``FANOUT_HOME`` answers on its metrics port.

``fanout consume ... --metrics-port P`` records the port it bound (P, or the free port it was
given for 0) in ``$FANOUT_HOME/consume-<which>.metrics-port`` and removes the file when it exits
cleanly. ``python -m timeline_fanout.healthcheck`` (the image's HEALTHCHECK) asks each
recorded port for ``/metrics`` on loopback and exits 0 only if all answer 200; 1 if one does not
or if no consumer recorded a port. Standard library only, and outside the layers' packages
(whose imports take seconds on a busy host), so the check starts fast.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

SUFFIX = ".metrics-port"
TIMEOUT_S = 3.0


def port_file(home: Path, which: str) -> Path:
    return home / f"consume-{which}{SUFFIX}"


def record_port(home: Path, which: str, port: int) -> Path:
    """Write the port atomically (a check never reads half a file)."""
    home.mkdir(parents=True, exist_ok=True)
    final = port_file(home, which)
    scratch = final.with_name(f"{final.name}.{os.getpid()}.tmp")
    scratch.write_text(f"{port}\n")
    scratch.replace(final)
    return final


def check(home: Path, timeout: float = TIMEOUT_S) -> list[str]:
    """The problems found: empty when every recorded consumer answered."""
    files = sorted(home.glob(f"consume-*{SUFFIX}"))
    if not files:
        return [f"no consumer recorded a metrics port in {home}"]
    problems: list[str] = []
    for file in files:
        url = f"http://127.0.0.1:{int(file.read_text())}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                if response.status != 200:
                    problems.append(f"{url}: HTTP {response.status}")
        except (OSError, urllib.error.URLError) as exc:
            problems.append(f"{url}: {exc}")
    return problems


def main() -> int:
    home = Path(os.environ.get("FANOUT_HOME") or ".fanout")
    problems = check(home)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
