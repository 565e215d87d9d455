"""Servers a test run started and left running: the run fails when any survives it.

Every process a test starts inherits the run's environment, servers started in a session of
their own (``start_new_session``) included, so a mark put in the environment before the first
test (and before xdist starts its workers) names the run's processes when the run is over; the
``PYTEST_CURRENT_TEST`` each inherited names the test that started it. Only servers are looked
for (memcached, the Kafka JVM, FerretDB, Tansu): a run's own Python processes have exited by
then. Linux ``/proc`` only; elsewhere nothing is found.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

RUN_MARK = "TIMELINE_FANOUT_TEST_RUN"  # not FANOUT_*: tests strip those from child environments
SERVER_NAMES = frozenset({"memcached", "ferretdb", "tansu"})
KAFKA_MAIN = "kafka.Kafka"


@dataclass(frozen=True, slots=True)
class Survivor:
    pid: int
    argv: tuple[str, ...]
    started_by: str  # the test that was running when it was started, as pytest named it

    def __str__(self) -> str:
        return f"pid {self.pid} ({' '.join(self.argv)[:120]}), started by {self.started_by}"


def mark_run() -> str:
    """Put a fresh run mark in this process's environment (inherited from now on)."""
    os.environ[RUN_MARK] = uuid.uuid4().hex
    return os.environ[RUN_MARK]


def _is_server(argv: tuple[str, ...]) -> bool:
    return bool(argv) and (Path(argv[0]).name in SERVER_NAMES or KAFKA_MAIN in argv)


def survivors(run: str) -> list[Survivor]:
    """The live server processes whose environment carries the mark ``run``."""
    wanted = f"{RUN_MARK}={run}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to read
            environ = (entry / "environ").read_bytes().split(b"\0")
            if wanted not in environ:
                continue
            argv = tuple(
                a.decode(errors="replace")
                for a in (entry / "cmdline").read_bytes().split(b"\0")
                if a
            )
            if not _is_server(argv):
                continue
            test = next(
                (
                    e.partition(b"=")[2].decode(errors="replace")
                    for e in environ
                    if e.startswith(b"PYTEST_CURRENT_TEST=")
                ),
                "no test (a fixture outside any test)",
            )
            found.append(Survivor(int(entry.name), argv, test))
    return found


def survivors_after(run: str, grace_s: float) -> list[Survivor]:
    """``survivors``, given ``grace_s`` for servers told to stop to finish exiting."""
    deadline = time.monotonic() + grace_s
    while (found := survivors(run)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found
