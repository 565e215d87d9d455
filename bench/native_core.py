"""The per-member passes of a fan-out, by the native core and by the Python reference in
alternation in one process (each figure's baseline is the other implementation, same run): the
decode of a follower list of N members as the graph consumer writes it (positioned additions
in 64 KiB shards; and with 1% removals, the general path), the chunk tasks of a post to N
followers (built, enveloped, encoded, decoded), and the timeline keys of N followers. CPU
seconds of this process per member, best of ``REPEAT``. No servers."""

from __future__ import annotations

import time
from collections.abc import Callable

from bench.report import Report, Row
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph.lists.tokens import (
    decode,
    decode_reference,
    encode_members,
    split_tokens,
)
from timeline_fanout.graph.model.keys import KeySpace, ListKind
from timeline_fanout.native import core
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
    report.write(bars, "µs of CPU a member")


def _cpu_s(fn: Callable[[], object]) -> float:
    started = time.process_time()
    fn()
    return time.process_time() - started


def _passes(n: int) -> dict[str, dict[str, Callable[[], object]]]:
    members = [f"f{i}" for i in range(n)]
    positions = range(FIRST_POSITION, FIRST_POSITION + n)
    shards = split_tokens(encode_members(members, list(positions)), 64 * 1024)
    removed = b"".join(b"-f%d#%x " % (i, FIRST_POSITION + n + i) for i in range(0, n, 100))
    with_removals = [*shards, removed]
    chunks = [members[i : i + CHUNK] for i in range(0, n, CHUNK)]
    keys = KeySpace("tf")

    def tasks(
        build: Callable[..., FanoutTask],
        encode: Callable[[FanoutTask], bytes],
        decode_one: Callable[[bytes], object],
    ) -> Callable[[], object]:
        def every_chunk() -> None:
            for i, chunk in enumerate(chunks):
                task = build(author="a", post_id="p", post_ts=1, chunk=i, followers=chunk)
                decode_one(encode(task.with_envelope()))  # type: ignore[arg-type]

        return every_chunk

    def reference_task(**fields: object) -> FanoutTask:
        return FanoutTask(type="fanout_task", **fields)

    return {
        "decode": {
            "reference": lambda: decode_reference(shards),
            "native": lambda: decode(shards),
        },
        "decode_with_removals": {
            "reference": lambda: decode_reference(with_removals),
            "native": lambda: decode(with_removals),
        },
        "chunk_tasks": {
            "reference": tasks(reference_task, encode_event_reference, decode_event_reference),
            "native": tasks(fanout_task, encode_event, decode_event),
        },
        "timeline_keys": {
            "reference": lambda: keys.user_keys_reference(ListKind.TIMELINE.value, members),
            "native": lambda: keys.list_keys(ListKind.TIMELINE, members),
        },
    }
