"""``fanout rebuild-cache [USER...]``: rebuild follower and following lists from the edge store
and drop the timelines built from them (their next reader regenerates them)."""

from __future__ import annotations

import argparse

from rich.progress import Progress

from timeline_fanout.cli import wiring
from timeline_fanout.cli.commands.base import Subcommands, err_console, user_ids
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph import ListKind, ListRef

# Users per step: one step's store reads stay well inside a rebuild claim's lifetime.
USERS_PER_STEP = 200


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("rebuild-cache", help="rebuild lists from the edge store")
    p.add_argument("users", nargs="*")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    store = wiring.edge_store(settings)
    lists = wiring.list_store(settings, store)
    users = user_ids(args.users) if args.users else list(store.users())
    with Progress(console=err_console, disable=not err_console.is_terminal) as progress:
        task = progress.add_task("rebuilding lists", total=len(users))
        for i in range(0, len(users), USERS_PER_STEP):
            chunk = users[i : i + USERS_PER_STEP]
            refs = [
                ListRef(kind, u) for u in chunk for kind in (ListKind.FOLLOWERS, ListKind.FOLLOWING)
            ]
            lists.invalidate(refs)
            lists.rebuild_many(refs)
            lists.invalidate(ListRef(ListKind.TIMELINE, u) for u in chunk)
            progress.advance(task, len(chunk))
    err_console.print(f"rebuilt the lists of {len(users)} users")
    return 0
