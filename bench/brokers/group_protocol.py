"""Group protocols: how long a group of three consumers is without a full assignment after one
member is SIGKILLed, and how long a fourth takes to get partitions after it joins.

Variants: the classic protocol (eager ``roundrobin``, as ``consumers.kafka_source``), with
dynamic and with static members (``group.instance.id``), and KIP-848's ``consumer`` protocol
(assignment computed by the broker, heartbeats carry it), dynamic and static. Every variant has
the same 10 s session timeout (the classic one from the client, KIP-848's from the group's
``consumer.session.timeout.ms``, which the local broker allows down to 6 s) and the same
heartbeat interval. Members run as separate processes so that one can be SIGKILLed; each reports
its assignment on every change, and the clock stops when the survivors (or all four) own all six
partitions again, each exactly once. Apache Kafka only: Tansu speaks neither static expiry nor
KIP-848.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field

import orjson
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from bench.support.report import Report
from timeline_fanout.cli.settings import Settings
from timeline_fanout.kafka_log import logged
from timeline_fanout.producers import create_topics

PARTITIONS = 6
SESSION_MS = 10_000
HEARTBEAT_MS = 3_000
VARIANTS = {
    "classic dynamic": ("classic", False),
    "classic static": ("classic", True),
    "consumer dynamic": ("consumer", False),
    "consumer static": ("consumer", True),
}

MEMBER = """
import sys, orjson
from confluent_kafka import Consumer
bootstrap, group, topic, protocol, instance, session, heartbeat = sys.argv[1:8]
conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "group.protocol": protocol}
if protocol == "classic":
    conf |= {"session.timeout.ms": int(session), "heartbeat.interval.ms": int(heartbeat),
             "partition.assignment.strategy": "roundrobin"}
if instance != "-":
    conf["group.instance.id"] = instance
consumer = Consumer(conf)
def report(added, gone):
    # Inside a callback the change is not applied yet: what is owned once it is.
    owned = {tp.partition for tp in [*consumer.assignment(), *added]}
    owned -= {tp.partition for tp in gone}
    print(orjson.dumps(sorted(owned)).decode(), flush=True)
consumer.subscribe(
    [topic],
    on_assign=lambda _c, partitions: report(partitions, []),
    on_revoke=lambda _c, partitions: report([], partitions),
    on_lost=lambda _c, partitions: report([], partitions),
)
while True:
    consumer.poll(0.1)
"""


@dataclass
class Member:
    proc: subprocess.Popen[bytes]
    owned: list[int] = field(default_factory=list)
    buffer: bytes = b""


def _start(settings: Settings, group: str, topic: str, protocol: str, name: str) -> Member:
    argv = [sys.executable, "-c", MEMBER, settings.kafka, group, topic, protocol, name]
    argv += [str(SESSION_MS), str(HEARTBEAT_MS)]
    return Member(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL))


def _read(members: list[Member], timeout: float) -> None:
    streams = {m.proc.stdout: m for m in members if m.proc.stdout is not None}
    ready, _, _ = select.select(list(streams), [], [], timeout)
    for stream in ready:
        member = streams[stream]
        chunk = os.read(stream.fileno(), 65536)
        member.buffer += chunk
        *lines, member.buffer = member.buffer.split(b"\n")
        for line in lines:
            member.owned = orjson.loads(line)


def _settled(members: list[Member]) -> bool:
    owned = sorted(p for m in members for p in m.owned)
    return owned == list(range(PARTITIONS)) and all(m.owned for m in members)


def _until_settled(members: list[Member], deadline: float) -> float:
    started = time.monotonic()
    while not _settled(members):
        if time.monotonic() > deadline:
            return float("nan")
        _read(members, 0.05)
    return time.monotonic() - started


def _group_session(settings: Settings, group: str) -> None:
    admin = AdminClient(logged({"bootstrap.servers": settings.kafka}))
    entries = [
        ConfigEntry(name, str(ms), incremental_operation=AlterConfigOpType.SET)
        for name, ms in (
            ("consumer.session.timeout.ms", SESSION_MS),
            ("consumer.heartbeat.interval.ms", HEARTBEAT_MS),
        )
    ]
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=10)


def _one(settings: Settings, variant: str) -> dict[str, object]:
    protocol, static = VARIANTS[variant]
    run = uuid.uuid4().hex[:8]
    topic, group = f"bgp{run}", f"bgp{run}"
    create_topics(settings.kafka, [topic], PARTITIONS)
    if protocol == "consumer":
        _group_session(settings, group)
    names = [f"m{i}" if static else "-" for i in range(4)]
    members = [_start(settings, group, topic, protocol, names[i]) for i in range(3)]
    try:
        first = _until_settled(members, time.monotonic() + 120)
        victim = members.pop(0)
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait()
        for m in members:  # what a survivor still owns from before the kill does not count
            m.owned = [p for p in m.owned if p not in victim.owned]
        after_kill = _until_settled(members, time.monotonic() + 120)
        members.append(_start(settings, group, topic, protocol, names[3]))
        after_join = _until_settled(members, time.monotonic() + 120)
    finally:
        for m in members:
            m.proc.send_signal(signal.SIGKILL)
            m.proc.wait()
    return {
        "variant": variant,
        "first_assignment_s": round(first, 2),
        "after_sigkill_s": round(after_kill, 2),
        "after_join_s": round(after_join, 2),
    }


def run(settings: Settings, report: Report) -> None:
    rounds = 1 if report.quick else 3
    bars: list[tuple[str, float]] = []
    for i in range(rounds):
        order = list(VARIANTS) if i % 2 == 0 else list(reversed(VARIANTS))  # alternated
        for variant in order:
            row = _one(settings, variant)
            report.add(round=i, **row)
            bars.append((f"{variant} kill", float(str(row["after_sigkill_s"]))))
    report.write(bars, "seconds without a full assignment after a SIGKILL")
