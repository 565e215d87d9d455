"""``fanout stack up|down|status``: the local development stack (devstack/)."""

from __future__ import annotations

import argparse

from timeline_fanout.cli.commands.base import Subcommands, console
from timeline_fanout.cli.settings import Settings
from timeline_fanout_devstack import stack
from timeline_fanout_devstack.broker_choice import BROKERS
from timeline_fanout_devstack.home import stack_file


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("stack", help="the local stack (Apache Kafka or Tansu + 3 memcached)")
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument(
        "--broker",
        choices=BROKERS,
        help="up: kafka (Apache Kafka, needs Java) or tansu; default FANOUT_BROKER, else kafka "
        "where Java is present",
    )
    p.add_argument("--purge", action="store_true", help="down: also delete .fanout/ (edge store)")
    p.add_argument(
        "--edge-store",
        choices=["sqlite", "mongodb"],
        default="sqlite",
        help="up: mongodb also runs a FerretDB server and records its URL as the edge store",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.action == "up":
        state = stack.stack_up(
            settings.topics, settings.partitions, args.broker, edge_store=args.edge_store
        )
        console.print(f"kafka {state.kafka} ({state.broker})\nmemcached {state.memcached}")
        if state.edge_store:
            console.print(f"edge store {state.edge_store}")
        console.print(f"recorded in {stack_file()}")
        return 0
    if args.action == "down":
        stopped = stack.stack_down(purge=args.purge)
        console.print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
        return 0
    status = stack.stack_status(stack.StackState.load(stack_file()))
    if not status:
        console.print("no local stack recorded (run `fanout stack up`)")
        return 1
    for name, up in status.items():
        console.print(f"{name}: {'up' if up else 'DOWN'}")
    return 0 if all(status.values()) else 1
