"""``fanout publish``: one event from the arguments, or a file of JSON lines
(cli/publish_file.py)."""

from __future__ import annotations

import argparse

from timeline_fanout.cli import wiring
from timeline_fanout.cli.commands.base import Subcommands, err_console
from timeline_fanout.cli.publish_file import publish_file
from timeline_fanout.cli.settings import Settings
from timeline_fanout.producers import PublishError
from timeline_fanout.schemas import EventDecodeError, validate_event

# The kind named on the command line, and the event type it publishes: ``delete`` reads as
# the action it is, the wire keeps the event's name.
KINDS = {"follow": "follow", "unfollow": "unfollow", "post": "post", "delete": "post_deleted"}
POST_KINDS = ("post", "delete")


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("publish", help="publish events")
    p.add_argument(
        "kind", nargs="?", choices=list(KINDS), help="delete publishes a post_deleted event"
    )
    p.add_argument("a", nargs="?", help="follower (follow/unfollow) or author (post/delete)")
    p.add_argument("b", nargs="?", help="followee (follow/unfollow) or post id (post/delete)")
    p.add_argument("--text", help="post: the post's text")
    p.add_argument("--group")
    p.add_argument("--file", help="one JSON event per line; - for stdin")
    p.add_argument(
        "--rejects", metavar="FILE", help='--file: write {"line": N, "reason": ...} per bad line'
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.rejects and not args.file:
        raise SystemExit("--rejects goes with --file")
    publisher = wiring.publisher(settings)
    if args.file:
        summary = publish_file(publisher, args.file, err_console, args.rejects)
        print(summary.line())
        return 0 if summary.ok else 1
    if args.kind is None:
        raise SystemExit(f"publish needs an event ({'/'.join(KINDS)}) or --file")
    fields: dict[str, object] = {"type": KINDS[args.kind]}
    if args.kind in POST_KINDS:  # --text with delete is refused below: a deletion has no text
        fields.update(author=args.a, post_id=args.b, text=args.text)
    else:
        fields.update(follower=args.a, followee=args.b)
        if args.kind == "follow" and args.group:
            fields["group"] = args.group
    try:
        event = validate_event({k: v for k, v in fields.items() if v is not None})
    except EventDecodeError as exc:
        raise SystemExit(f"invalid event: {exc}") from None
    try:
        with publisher:
            sent = publisher.publish(event)
    except PublishError as exc:
        raise SystemExit(str(exc)) from None
    print(f"published {sent.type} {sent.event_id}")
    return 0
