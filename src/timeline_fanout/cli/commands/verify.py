"""``fanout verify``: sample users, compare their cached lists and timelines with the edge store,
print and export the divergence, repair on request (graph/anti_entropy.py does the work)."""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile
from rich.progress import Progress

from timeline_fanout.cli import wiring
from timeline_fanout.cli.commands.base import Subcommands, console
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph.anti_entropy import AntiEntropy, Report


def sample_users(users: list[str], size: int, seed: int | None) -> list[str]:
    return users if size >= len(users) else random.Random(seed).sample(users, size)


def export(report: Report, path: Path) -> None:
    """A Prometheus textfile (node_exporter's textfile collector reads it): verify is a job,
    not a server, so its figures are written where a scraper picks them up."""
    registry = CollectorRegistry()
    gauges = {
        name: Gauge(f"fanout_verify_{name}", help_, ["kind"], registry=registry)
        for name, help_ in (
            ("checked", "cached lists compared with the edge store"),
            ("not_cached", "sampled lists not in the cache (nothing to compare)"),
            ("divergent", "cached lists that still differed from the store after settling"),
            ("repaired", "divergent lists dropped so that their next reader rebuilds them"),
        )
    }
    for kind, found in report.kinds.items():
        for name, gauge in gauges.items():
            gauge.labels(kind.name.lower()).set(getattr(found, name))
    write_to_textfile(str(path), registry)


def run(args: argparse.Namespace, settings: Settings) -> int:
    store = wiring.edge_store(settings)
    reader = wiring.timeline_reader(settings, store)
    checker = AntiEntropy(store, reader, settings.timeline_max)
    users = args.users or sample_users(list(store.users()), args.sample, args.seed)
    with Progress(console=console, disable=not console.is_terminal) as progress:
        task = progress.add_task("comparing with the edge store", total=3 * len(users))
        report = checker.check(users, args.repair, lambda n: progress.advance(task, n))
    for kind, found in report.kinds.items():
        console.print(
            f"{kind.name.lower()}: checked {found.checked}, not cached {found.not_cached}, "
            f"divergent {found.divergent}, repaired {found.repaired}"
        )
        for example in found.examples:
            console.print(f"  {example}")
    if args.metrics_file:
        export(report, Path(args.metrics_file))
    return 1 if report.divergent else 0


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("verify", help="compare cached lists and timelines with the edge store")
    p.add_argument("users", nargs="*", help="these users (default: a random sample)")
    p.add_argument("--sample", type=int, default=1000, help="users to sample (default 1000)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--repair", action="store_true", help="drop divergent lists (rebuilt on read)")
    p.add_argument(
        "--metrics-file", metavar="PATH", help="write the figures as a Prometheus textfile"
    )
    p.set_defaults(run=run)
