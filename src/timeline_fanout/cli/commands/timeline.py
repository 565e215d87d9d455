"""``fanout timeline USER``: a home timeline page, newest first, with the cursor of the next."""

from __future__ import annotations

import argparse

from timeline_fanout.cli import wiring
from timeline_fanout.cli.commands.base import Subcommands, page_arguments, print_page, user_ids
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph.timelines.reader import BadCursor


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("timeline", help="a user's home timeline, newest first")
    p.add_argument("user")
    page_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    (user,) = user_ids([args.user])
    store = wiring.edge_store(settings)
    try:
        page = wiring.timeline_reader(settings, store).page(user, args.limit, args.before)
    except BadCursor as exc:
        raise SystemExit(f"--before: {exc}") from None
    lines = (
        f"{e.ts}  {e.author:<20} {e.post_id}  {text or ''}"
        for e, text in zip(page.entries, page.texts, strict=True)
    )
    print_page(args, page.body(), lines, page.next)
    return 0
