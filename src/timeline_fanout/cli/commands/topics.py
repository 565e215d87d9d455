"""``fanout topics create``: the topics, with the configured partitions and replication."""

from __future__ import annotations

import argparse

from timeline_fanout.cli.commands.base import Subcommands, console
from timeline_fanout.cli.settings import Settings
from timeline_fanout.producers import create_topics


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("topics", help="create the topics")
    p.add_argument("action", choices=["create"])
    p.add_argument("--partitions", type=int)
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    outcome = create_topics(
        settings.kafka,
        settings.topics.all(),
        args.partitions or settings.partitions,
        settings.replication,
        settings.kafka_config,
    )
    for topic, what in outcome.items():
        console.print(f"{topic}: {what}")
    return 0
