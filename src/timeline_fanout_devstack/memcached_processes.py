"""memcached processes of a caller's own, to kill, restart, stop and continue (never the
recorded stack's servers): the failover tests and ``bench failover`` use them."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from timeline_fanout_devstack.ports import free_port, listens
from timeline_fanout_devstack.stack import memcached_answers, memcached_argv


def start(port: int) -> subprocess.Popen[bytes]:
    """memcached on ``port``, returned once it answers."""
    proc = subprocess.Popen(
        memcached_argv(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 10
    while not (listens(proc.pid, port) and memcached_answers(f"127.0.0.1:{port}")):
        assert time.monotonic() < deadline and proc.poll() is None, "memcached did not start"
        time.sleep(0.05)
    return proc


def end(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGCONT)
    proc.kill()
    proc.wait()


@contextlib.contextmanager
def own_server() -> Iterator[tuple[subprocess.Popen[bytes], tuple[str, int]]]:
    port = free_port()
    proc = start(port)
    try:
        yield proc, ("127.0.0.1", port)
    finally:
        end(proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGSTOP, returning once every thread of the process has stopped: the signal is
    delivered asynchronously, and a memcached thread still running could answer a request
    written after ``kill`` returned (a CI run on a loaded machine saw that happen)."""
    proc.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while True:
        states = []
        for stat in Path(f"/proc/{proc.pid}/task").glob("*/stat"):
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                states.append(stat.read_text().rpartition(")")[2].split()[0])
        if states and all(state in ("T", "t") for state in states):
            return
        assert time.monotonic() < deadline, f"memcached did not stop: thread states {states}"
        time.sleep(0.01)
