"""``fanout followers|following USER...``: read follower or following lists (rebuilt from the
edge store on a miss, as any reader does)."""

from __future__ import annotations

import argparse
import sys

import orjson

from timeline_fanout.cli import wiring
from timeline_fanout.cli.commands.base import Subcommands, user_ids
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph import ListKind, ListRef


def add_parser(sub: Subcommands) -> None:
    for name in ("followers", "following"):
        p = sub.add_parser(name, help=f"read {name} lists (rebuilt from the edge store on a miss)")
        p.add_argument("users", nargs="+")
        p.add_argument("--json", action="store_true")
        p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    kind = ListKind.FOLLOWERS if args.command == "followers" else ListKind.FOLLOWING
    store = wiring.edge_store(settings)
    lists = wiring.list_store(settings, store)
    refs = [ListRef(kind, u) for u in user_ids(args.users)]
    found = lists.read_many(refs)
    for ref in refs:
        members = sorted(found[ref])
        if args.json:
            line = {"user": ref.user, args.command: members, "count": len(members)}
            sys.stdout.write(orjson.dumps(line).decode() + "\n")
        else:
            print(f"{ref.user} ({len(members)}): {' '.join(members)}")
    return 0
