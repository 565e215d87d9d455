"""``fanout demo``: the main job on the local stack, in a sandbox of its own (cli/demo.py)."""

from __future__ import annotations

import argparse

from timeline_fanout.cli.commands.base import Subcommands, console
from timeline_fanout.cli.settings import Settings


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("demo", help="the main job on the local stack")
    p.add_argument("--users", type=int, default=200)
    p.add_argument("--events", type=int, default=5000)
    p.add_argument("--posts", type=int, default=2000)
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from timeline_fanout.cli.demo import run_demo  # the demo's imports only when it runs

    return run_demo(settings, args.users, args.events, args.posts, console)
