"""``fanout posts USER``: a page of one author's posts with their texts, newest first, with the
cursor of the next (graph/timelines/author_pages.py)."""

from __future__ import annotations

import argparse
import sys

import orjson

from fanout import wiring
from fanout.commands.base import Subcommands, user_ids
from fanout.settings import Settings
from graph.timelines.author_pages import page_body
from graph.timelines.reader import BadCursor


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("posts", help="one author's posts with their texts, newest first")
    p.add_argument("user")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument(
        "--before", metavar="CURSOR", help="start after this post (a cursor printed by a read)"
    )
    p.add_argument("--json", action="store_true")
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
    if args.json:
        sys.stdout.write(orjson.dumps(page_body(page)).decode() + "\n")
    else:
        for post in page.posts:
            print(f"{post.ts}  {post.post_id:<20} {post.text or ''}")
        if page.next is not None:
            print(f"next page: --before {page.next}")
    return 0
