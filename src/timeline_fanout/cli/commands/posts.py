"""``fanout posts USER``: a page of one author's posts with their texts, newest first, with the
cursor of the next (graph/timelines/author_pages.py)."""

from __future__ import annotations

import argparse

from timeline_fanout.cli import wiring
from timeline_fanout.cli.commands.base import Subcommands, page_arguments, print_page, user_ids
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph.timelines.reader import BadCursor


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("posts", help="one author's posts with their texts, newest first")
    p.add_argument("user")
    page_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    (user,) = user_ids([args.user])
    store = wiring.edge_store(settings)
    try:
        page = wiring.timeline_reader(settings, store).author_pages.page(
            user, args.limit, args.before
        )
    except BadCursor as exc:
        raise SystemExit(f"--before: {exc}") from None
    finally:
        store.close()
    lines = (f"{post.ts}  {post.post_id:<20} {post.text or ''}" for post in page.posts)
    print_page(args, page.body(), lines, page.next)
    return 0
