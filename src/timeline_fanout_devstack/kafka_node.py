"""One Apache Kafka KRaft node (broker and controller in one JVM) on loopback, from cached jars.

A node is configured for tests and the local stack: group joins start at once
(``group.initial.rebalance.delay.ms=0``), internal topics have one replica per node up to three,
the heap is small, and the broker's log4j2 output goes to ``logs/<name>.log``. Its storage is
formatted by ``kafka.tools.StorageTool format`` (``--standalone`` for one node, the initial
controller set otherwise) under a cluster id made fresh for each start, which is how a starter
knows the broker answering on its port is its own (``cluster_id`` of the metadata answer).

Ports are picked free and then bound by the JVM, which cannot bind port 0 for the controller
quorum: another process may take a port in between. Such a lost race is told apart from other
failures (the JVM exits with a BindException in its log) and the node is started again on new
ports, up to ``PORT_ATTEMPTS`` times.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from timeline_fanout.kafka_log import logged
from timeline_fanout_devstack.kafka_jars import classpath, fetch_jars
from timeline_fanout_devstack.ports import free_port, listens

PORT_ATTEMPTS = 5
HEAP = "-Xmx256m"


class KafkaNodeError(RuntimeError):
    pass


class PortTaken(KafkaNodeError):
    """The JVM could not bind a port picked for it: another process took it first."""


@dataclass(frozen=True)
class KafkaNode:
    """Where one node listens and keeps its files (``server.properties``, ``data/``)."""

    node_id: int
    broker_port: int
    controller_port: int
    directory: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    @property
    def controller(self) -> str:
        return f"127.0.0.1:{self.controller_port}"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def properties(self) -> Path:
        return self.directory / "server.properties"


@dataclass(frozen=True)
class RunningNode:
    node: KafkaNode
    pid: int
    cluster_id: str
    started_in_s: float  # from spawning the JVM until the broker answered metadata requests


def java_binary() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    return shutil.which("java")


def new_cluster_id() -> str:
    """A random cluster id as Kafka makes them (``Uuid.randomUuid``): base64url of 16 random
    bytes, never starting with ``-``, which the storage tool's parser would take for an option
    (one id in 64 does)."""
    while True:
        found = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not found.startswith("-"):
            return found


def server_properties(node: KafkaNode, voters: Sequence[KafkaNode]) -> str:
    replicas = min(3, len(voters))
    settings = {
        "process.roles": "broker,controller",
        "node.id": node.node_id,
        "listeners": f"PLAINTEXT://{node.bootstrap},CONTROLLER://{node.controller}",
        "advertised.listeners": f"PLAINTEXT://{node.bootstrap}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "controller.quorum.bootstrap.servers": ",".join(v.controller for v in voters),
        "log.dirs": node.data_dir,
        "num.partitions": 1,
        "offsets.topic.replication.factor": replicas,
        # Fewer than the default 50: the offsets topic is created on the first group's join.
        "offsets.topic.num.partitions": 10,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": min(2, replicas),
        "transaction.state.log.num.partitions": 10,
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": min(2, replicas),
        "group.initial.rebalance.delay.ms": 0,
        # KIP-848 groups may be given sessions as short as classic ones
        # (bench/brokers/group_protocol.py).
        "group.consumer.min.session.timeout.ms": 6000,
        "group.consumer.min.heartbeat.interval.ms": 1000,
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def log4j_properties(log_file: Path) -> str:
    return (
        "status = warn\n"
        "appender.file.type = File\n"
        "appender.file.name = file\n"
        f"appender.file.fileName = {log_file}\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
        "rootLogger.level = info\n"
        "rootLogger.appenderRef.file.ref = file\n"
    )


def _jvm(java: str, jars: Path, log4j: Path) -> list[str]:
    return [
        java,
        HEAP,
        "-XX:+UseSerialGC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        classpath(jars),
    ]


def format_storage(
    java: str, jars: Path, node: KafkaNode, voters: Sequence[KafkaNode], cluster_id: str
) -> None:
    """``StorageTool format``: a one-node quorum is ``--standalone``; a larger one names every
    initial controller with the directory id it formats (``id@host:port:directory-id``)."""
    if len(voters) == 1:
        quorum = ["--standalone"]
    else:
        controllers = ",".join(f"{v.node_id}@{v.controller}:{_directory_id(v)}" for v in voters)
        quorum = ["--initial-controllers", controllers]
    argv = [
        *_jvm(java, jars, node.directory / "log4j2.properties"),
        "kafka.tools.StorageTool",
        "format",
        "--cluster-id",
        cluster_id,
        "--config",
        str(node.properties),
        *quorum,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=node.directory, check=False)
    if done.returncode != 0:
        raise KafkaNodeError(f"kafka storage format failed: {done.stdout}{done.stderr}")


def _directory_id(node: KafkaNode) -> str:
    """A stable directory id per node (derived from its id, so every node's format agrees)."""
    return (
        base64.urlsafe_b64encode(uuid.uuid5(uuid.NAMESPACE_OID, str(node.node_id)).bytes)
        .rstrip(b"=")
        .decode()
    )


def prepare(node: KafkaNode, voters: Sequence[KafkaNode], logs: Path, name: str) -> None:
    """Write the node's configuration files (its data directory is left as it is)."""
    node.directory.mkdir(parents=True, exist_ok=True)
    node.properties.write_text(server_properties(node, voters))
    (node.directory / "log4j2.properties").write_text(log4j_properties(logs / f"{name}.log"))


def spawn(java: str, jars: Path, node: KafkaNode, logs: Path, name: str) -> subprocess.Popen[bytes]:
    """Start the JVM in its own session (a stack outlives the command that started it); its
    stdout and stderr (the JVM's own complaints, before log4j) go to ``logs/<name>.out``."""
    with (logs / f"{name}.out").open("ab") as out:
        return subprocess.Popen(
            [
                *_jvm(java, jars, node.directory / "log4j2.properties"),
                "kafka.Kafka",
                str(node.properties),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=node.directory,
            start_new_session=True,
        )


def await_group_coordinator(bootstrap: str, deadline: float) -> None:
    """Until a group coordinator answers: the first FindCoordinator of a fresh cluster creates
    the offsets topic, which takes seconds; a started stack has done it already, so no client's
    first group request waits for it."""
    consumer = Consumer(logged({"bootstrap.servers": bootstrap, "group.id": "fanout-stack-ready"}))
    try:
        while True:
            try:
                consumer.committed([TopicPartition("fanout-stack-ready", 0)], timeout=2)
                return
            except KafkaException:
                if time.monotonic() > deadline:
                    raise KafkaNodeError("no group coordinator answered in time") from None
    finally:
        consumer.close()


def cluster_id_at(bootstrap: str, timeout: float = 1.0) -> str | None:
    """The cluster id the broker at ``bootstrap`` answers with, or None if none answers."""
    host, _, port = bootstrap.rpartition(":")
    try:  # a plain connect first: librdkafka would log every refused connection
        socket.create_connection((host, int(port)), timeout=timeout).close()
        metadata = AdminClient(logged({"bootstrap.servers": bootstrap})).list_topics(
            timeout=timeout
        )
    except Exception:
        return None
    found: str | None = metadata.cluster_id
    return found


def _log_sizes(logs: Path, name: str) -> dict[Path, int]:
    paths = (logs / f"{name}.log", logs / f"{name}.out")
    return {p: p.stat().st_size if p.exists() else 0 for p in paths}


def _lost_port(since: dict[Path, int]) -> bool:
    """Whether the JVM's output written after ``since`` (sizes per file) tells of a port that
    could not be bound."""
    for path, offset in since.items():
        with contextlib.suppress(FileNotFoundError), path.open("rb") as f:
            f.seek(offset)
            text = f.read()
            if b"BindException" in text or b"Address already in use" in text:
                return True
    return False


def await_node(
    proc: subprocess.Popen[bytes],
    node: KafkaNode,
    cluster_id: str,
    name: str,
    log_sizes: dict[Path, int],
    deadline: float,
) -> None:
    """Until the broker on ``node.bootstrap`` answers with ``cluster_id`` while ``proc`` lives.

    Raises PortTaken when the JVM exited on a port it could not bind."""
    while True:
        if proc.poll() is not None:
            if _lost_port(log_sizes):
                raise PortTaken(f"{name}: a port was taken before the JVM bound it")
            raise KafkaNodeError(f"{name} exited with {proc.returncode} (see its log)")
        ours = listens(proc.pid, node.broker_port) and listens(proc.pid, node.controller_port)
        if ours and cluster_id_at(node.bootstrap) == cluster_id:
            return
        if time.monotonic() > deadline:
            raise KafkaNodeError(f"{name} did not answer in time (see its log)")
        time.sleep(0.1)


def start_node(
    java: str,
    jars: Path,
    node: KafkaNode,
    cluster_id: str,
    logs: Path,
    name: str,
    deadline: float,
) -> RunningNode:
    """Spawn a prepared and formatted node and wait until it answers as ``cluster_id``."""
    sizes = _log_sizes(logs, name)
    started = time.monotonic()
    proc = spawn(java, jars, node, logs, name)
    try:
        await_node(proc, node, cluster_id, name, sizes, deadline)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
        raise
    return RunningNode(node, proc.pid, cluster_id, time.monotonic() - started)


def node_name(node: KafkaNode, size: int) -> str:
    """Its log files' name: ``kafka`` alone, ``kafkaN`` in a cluster of several."""
    return "kafka" if size == 1 else f"kafka{node.node_id}"


def _java_and_jars() -> tuple[str, Path]:
    java = java_binary()
    if java is None:
        raise KafkaNodeError("java is not installed: the Kafka broker needs Java 17+")
    return java, fetch_jars()


def start_cluster(
    directory: Path, logs: Path, size: int = 1, timeout: float = 60.0
) -> list[RunningNode]:
    """A fresh cluster of ``size`` combined nodes (``directory`` is emptied first), started
    again on new ports when a picked port was taken before a JVM bound it. The nodes are
    spawned together: a quorum of several elects its leader only once a majority runs.

    Each attempt has ``timeout`` seconds of its own: an attempt lost to a port race says
    nothing about how slowly the next JVM starts, and on a loaded machine one failed start
    plus the storage tool runs for the next can take most of a shared budget."""
    java, jars = _java_and_jars()
    logs.mkdir(parents=True, exist_ok=True)
    for attempt in itertools.count(1):
        deadline = time.monotonic() + timeout
        shutil.rmtree(directory, ignore_errors=True)
        nodes = [
            KafkaNode(i, free_port(), free_port(), directory / f"node{i}")
            for i in range(1, size + 1)
        ]
        cluster_id = new_cluster_id()
        for node in nodes:
            prepare(node, nodes, logs, node_name(node, size))
            format_storage(java, jars, node, nodes, cluster_id)
        sizes = [_log_sizes(logs, node_name(node, size)) for node in nodes]
        started = time.monotonic()
        procs = [spawn(java, jars, node, logs, node_name(node, size)) for node in nodes]
        try:
            for node, proc, since in zip(nodes, procs, sizes, strict=True):
                await_node(proc, node, cluster_id, node_name(node, size), since, deadline)
        except BaseException as exc:
            for proc in procs:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait()
            if isinstance(exc, PortTaken) and attempt < PORT_ATTEMPTS:
                continue
            raise
        elapsed = time.monotonic() - started
        await_group_coordinator(",".join(n.bootstrap for n in nodes), deadline)
        return [
            RunningNode(n, p.pid, cluster_id, elapsed) for n, p in zip(nodes, procs, strict=True)
        ]
    raise AssertionError("itertools.count does not end")


def start_single_node(directory: Path, logs: Path, timeout: float = 60.0) -> RunningNode:
    """A fresh one-node cluster (see ``start_cluster``)."""
    return start_cluster(directory, logs, 1, timeout)[0]


def restart_node(running: RunningNode, logs: Path, size: int, timeout: float = 60.0) -> RunningNode:
    """Start a stopped node of a cluster again on its ports, with its data as it was left."""
    java, jars = _java_and_jars()
    name = node_name(running.node, size)
    deadline = time.monotonic() + timeout
    return start_node(java, jars, running.node, running.cluster_id, logs, name, deadline)
