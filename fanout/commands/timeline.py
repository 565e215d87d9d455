"""``fanout timeline USER``: a home timeline page, newest first, with the cursor of the next."""

from __future__ import annotations

import argparse
import sys

import orjson

from fanout import wiring
from fanout.commands.base import Subcommands, user_ids
from fanout.settings import Settings
from graph.timelines.reader import BadCursor


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("timeline", help="a user's home timeline, newest first")
    p.add_argument("user")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument(
        "--before", metavar="CURSOR", help="start after this entry (a cursor printed by a read)"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    (user,) = user_ids([args.user])
    store = wiring.edge_store(settings)
    try:
        page = wiring.timeline_reader(settings, store).page(user, args.limit, args.before)
    except BadCursor as exc:
        raise SystemExit(f"--before: {exc}") from None
    if args.json:
        sys.stdout.write(orjson.dumps(page.body()).decode() + "\n")
    else:
        for e, text in zip(page.entries, page.texts, strict=True):
            print(f"{e.ts}  {e.author:<20} {e.post_id}  {text or ''}")
        if page.next is not None:
            print(f"next page: --before {page.next}")
    return 0
