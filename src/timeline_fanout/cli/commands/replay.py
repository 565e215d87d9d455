"""``fanout replay``: re-consume a topic under a dedicated group, idempotently.

The live groups' offsets are never touched: the replay assigns its partitions explicitly and
commits only to ``GROUP.replay-graph`` / ``GROUP.replay-fanout``. Every effect is idempotent
(positions in the edge store, set semantics in the lists), so replaying over live state changes
nothing and replaying into an empty store and cache rebuilds them.
"""

from __future__ import annotations

import argparse
import threading
from datetime import UTC, datetime
from pathlib import Path

import orjson
from confluent_kafka import TopicPartition
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from timeline_fanout.cli import gc_policy, wiring
from timeline_fanout.cli.commands.base import Subcommands, err_console
from timeline_fanout.cli.settings import Settings
from timeline_fanout.consumers.loop import BatchReport
from timeline_fanout.consumers.positions import Origin
from timeline_fanout.consumers.replay import (
    FromBeginning,
    FromOffsets,
    FromTime,
    ReplayStart,
    resolve,
)


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("replay", help="re-consume a topic under a dedicated group")
    p.add_argument("which", choices=["graph", "fanout"])
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="the default")
    start.add_argument("--from-offsets", metavar="FILE", help='JSON {"partition": offset}')
    start.add_argument("--from-time", metavar="ISO8601", help="e.g. 2026-11-21T07:00:00Z")
    p.add_argument("--until-idle", type=float, default=5.0, metavar="SECONDS")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    start = parse_start(args.from_beginning, args.from_offsets, args.from_time)
    return run_replay(settings, args.which, start, args.until_idle, err_console)


def parse_start(
    from_beginning: bool, from_offsets: str | None, from_time: str | None
) -> ReplayStart:
    if from_offsets is not None:
        raw = orjson.loads(Path(from_offsets).read_bytes())
        return FromOffsets({int(p): int(o) for p, o in raw.items()})
    if from_time is not None:
        moment = datetime.fromisoformat(from_time)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return FromTime(int(moment.timestamp() * 1000))
    return FromBeginning()


def run_replay(
    settings: Settings, which: str, start: ReplayStart, until_idle: float, console: Console
) -> int:
    topic = settings.topics.graph if which == "graph" else settings.topics.posts
    starts = resolve(settings.kafka, topic, start, settings.kafka_config)
    assignment = [TopicPartition(topic, s.partition, s.offset) for s in starts]
    build = wiring.graph_loop if which == "graph" else wiring.fanout_loop
    loop = build(settings, threading.Event(), assignment)
    gc_policy.tune_for_consuming()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=console, disable=not console.is_terminal) as progress:
        bars = {
            s.partition: progress.add_task(
                f"{topic}[{s.partition}] from {s.offset}", total=max(s.end - s.offset, 0)
            )
            for s in starts
        }
        first = {s.partition: s.offset for s in starts}

        def advance(report: BatchReport) -> None:
            for origin in map(Origin.of, report.messages):
                done = origin.offset + 1 - first[origin.partition]
                task = bars[origin.partition]
                total = max(progress.tasks[task].total or 0, done)
                progress.update(task, completed=done, total=total)

        loop.observers.append(advance)
        try:
            stats = loop.run(until_idle=until_idle)
        finally:
            loop.source.close()
    for s in starts:
        how = " (broker's time lookup was wrong: found by scanning)" if s.scanned else ""
        console.print(f"{topic}[{s.partition}]: replayed from offset {s.offset}{how}")
    console.print(
        f"replayed {stats.applied} events in {stats.batches} batches, "
        f"dead-lettered {stats.dead_lettered}, retries {stats.retries}"
    )
    return 0
