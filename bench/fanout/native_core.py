"""The per-member passes of a fan-out, by the native core and by the Python reference in
alternation in one process (each figure's baseline is the other implementation, same run): the
decode of a follower list of N members as the graph consumer writes it, each member checked as
a user id (``decode_ids``; positioned additions in 64 KiB shards; and with 1% removals, the
general path), the chunk tasks of a post to N
followers (built, enveloped, encoded, decoded), the timeline keys of N followers, each from
the followers as its decode gives them (the core's ``MemberList``, the reference's ``str``s),
and those keys placed on three servers (the core's ``place`` against the reference's families
and ``winners_reference``). CPU
seconds of this process per member, best of ``REPEAT``. Beside them, the memory a fan-out's
passes over N followers take at their peak (the list decoded, its chunk tasks built, encoded
and decoded, all held), each implementation in a fresh process (``FANOUT_NATIVE``), twice in
alternation. No servers."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.support.report import Report, Row
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph.lists.tokens import (
    decode_ids,
    decode_reference,
    encode_members,
    in_sequence,
    split_tokens,
)
from timeline_fanout.graph.model.keys import KeySpace, ListKind
from timeline_fanout.memcache.ring import (
    leading_parts,
    leading_parts_reference,
    place,
    winners_reference,
)
from timeline_fanout.native_core import core
from timeline_fanout.schemas import FanoutTask, decode_event, encode_event
from timeline_fanout.schemas.codec import (
    decode_event_reference,
    encode_event_reference,
    fanout_task,
)

SIZES = [1_000_000]
QUICK = [20_000]
REPEAT = 3
CHUNK = 10_000
NODES = ["127.0.0.1:11211", "127.0.0.1:11212", "127.0.0.1:11213"]  # where timeline keys go
FIRST_POSITION = 0x18C0000000000  # a position as the graph consumer writes them (ts << 20)


def run(settings: Settings, report: Report) -> None:
    del settings  # no servers
    if core is None:
        report.add(skipped="the native core is not built (or FANOUT_NATIVE=0)")
        report.write([], "µs a member")
        return
    bars: list[tuple[str, float]] = []
    for n in QUICK if report.quick else SIZES:
        for name, passes in _passes(n).items():
            cpu: dict[str, list[float]] = {"reference": [], "native": []}
            for _ in range(REPEAT):  # in alternation: the machine's noise falls on both
                for impl, samples in cpu.items():
                    samples.append(_cpu_s(passes[impl]))
            row: Row = {"pass": name, "members": n}
            for impl, samples in cpu.items():
                row[f"{impl}_us_per_member"] = round(min(samples) * 1e6 / n, 3)
            row["native_to_reference"] = round(min(cpu["native"]) / min(cpu["reference"]), 2)
            report.add(**row)
            bars += [(f"{name} ref", row["reference_us_per_member"])]
            bars += [(f"{name} native", row["native_us_per_member"])]
        growth: dict[str, list[float]] = {"0": [], "1": []}
        for _ in range(2):
            for mode, samples in growth.items():
                samples.append(_peak_growth_mib(n, mode))
        report.add(
            **{"pass": "peak_memory", "members": n},
            reference_peak_growth_mib=min(growth["0"]),
            native_peak_growth_mib=min(growth["1"]),
            # (a quick run's passes can stay within the memory the imports took)
            native_to_reference=round(min(growth["1"]) / max(min(growth["0"]), 0.1), 2),
        )
    report.write(bars, "µs of CPU a member")


def _peak_growth_mib(n: int, mode: str) -> float:
    """How far a fresh process's peak RSS grows over the passes (``FANOUT_NATIVE=mode``), the
    list's bytes read from a file first so that making them is not in the figure."""
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "list"
        data.write_bytes(_list_bytes(n))
        env = {**os.environ, "FANOUT_NATIVE": mode}
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                f"from bench.fanout.native_core import _held; _held({str(data)!r})",
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        )
    return float(done.stdout.split()[-1])


def _held(path: str) -> None:
    """The passes over one list, everything held; prints the peak RSS growth in MiB."""
    shards = split_tokens(Path(path).read_bytes(), 64 * 1024)
    before = _high_water_kib()
    members = in_sequence(decode_ids(shards).members)  # as the fan-out holds them
    payloads = [
        encode_event(_enveloped(fanout_task("a", "p", 1, c, members[i : i + CHUNK])))
        for c, i in enumerate(range(0, len(members), CHUNK))
    ]
    tasks = [decode_event(p) for p in payloads]
    print(len(tasks), round((_high_water_kib() - before) / 1024, 1))


def _high_water_kib() -> int:
    """This process's peak RSS (``VmHWM``): unlike ``ru_maxrss``, not inherited from the
    parent across fork and exec, whose own peak would hide the child's."""
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1])


def _enveloped(task: FanoutTask) -> FanoutTask:
    """The task as the publisher sends it (``with_envelope`` is typed for any event)."""
    full = task.with_envelope()
    assert isinstance(full, FanoutTask)
    return full


def _list_bytes(n: int) -> bytes:
    """A follower list of ``n`` members as the graph consumer writes it."""
    members = [f"f{i}" for i in range(n)]
    return encode_members(members, list(range(FIRST_POSITION, FIRST_POSITION + n)))


def _cpu_s(fn: Callable[[], object]) -> float:
    started = time.process_time()
    fn()
    return time.process_time() - started


def _passes(n: int) -> dict[str, dict[str, Callable[[], object]]]:
    members = [f"f{i}" for i in range(n)]
    shards = split_tokens(_list_bytes(n), 64 * 1024)
    removed = b"".join(b"-f%d#%x " % (i, FIRST_POSITION + n + i) for i in range(0, n, 100))
    with_removals = [*shards, removed]
    # Each implementation's followers as its decode gives them to the fan-out: the core's
    # Members (no str each) and the reference's str's.
    decoded = in_sequence(decode_ids(shards).members)
    given = {"reference": members, "native": decoded}
    chunks = {name: [m[i : i + CHUNK] for i in range(0, n, CHUNK)] for name, m in given.items()}
    keys = KeySpace("tf")
    timeline_keys = keys.list_keys(ListKind.TIMELINE, members)

    def tasks(
        build: Callable[..., FanoutTask],
        encode: Callable[[FanoutTask], bytes],
        decode_one: Callable[[bytes], object],
        chunks: list[Sequence[str]],
    ) -> Callable[[], object]:
        def every_chunk() -> None:
            for i, chunk in enumerate(chunks):
                task = build(author="a", post_id="p", post_ts=1, chunk=i, followers=chunk)
                decode_one(encode(_enveloped(task)))

        return every_chunk

    def reference_task(**fields: object) -> FanoutTask:
        return FanoutTask(type="fanout_task", **fields)

    return {
        "decode": {
            "reference": lambda: decode_reference(shards, ids=True),
            "native": lambda: decode_ids(shards),
        },
        "decode_with_removals": {
            "reference": lambda: decode_reference(with_removals, ids=True),
            "native": lambda: decode_ids(with_removals),
        },
        "chunk_tasks": {
            "reference": tasks(
                reference_task, encode_event_reference, decode_event_reference, chunks["reference"]
            ),
            "native": tasks(fanout_task, encode_event, decode_event, chunks["native"]),
        },
        "timeline_keys": {
            "reference": lambda: keys.user_keys_reference(ListKind.TIMELINE.value, members),
            "native": lambda: keys.list_keys(ListKind.TIMELINE, decoded),
        },
        "placement": {
            "reference": lambda: winners_reference(NODES, leading_parts_reference(timeline_keys)),
            "native": lambda: place(NODES, timeline_keys, leading_parts),
        },
    }
