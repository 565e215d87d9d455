"""The ``fanout`` command: argument parsing and dispatch only; the work lives in the packages."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType

import orjson
from rich.console import Console
from rich.progress import Progress

from fanout import logs, stack, verify_command, wiring
from fanout.broker_choice import BROKERS
from fanout.cli_help import DESCRIPTION, EPILOG, dash_id_hint
from fanout.publish_file import publish_file
from fanout.settings import Settings, stack_file
from graph import ListKind, ListRef
from graph.timelines.reader import BadCursor
from producers import PublishError, create_topics
from schemas import EventDecodeError, is_valid_id, validate_event

console = Console()
err_console = Console(stderr=True)


def _ids(values: Sequence[str]) -> list[str]:
    bad = [v for v in values if not is_valid_id(v)]
    if bad:
        raise SystemExit(f"invalid user id {bad[0]!r}: ids are 1..64 of [A-Za-z0-9_.:@-]")
    return list(values)


def cmd_stack(args: argparse.Namespace, settings: Settings) -> int:
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


def cmd_topics(args: argparse.Namespace, settings: Settings) -> int:
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


def cmd_publish(args: argparse.Namespace, settings: Settings) -> int:
    if args.rejects and not args.file:
        raise SystemExit("--rejects goes with --file")
    publisher = wiring.publisher(settings)
    if args.file:
        summary = publish_file(publisher, args.file, err_console, args.rejects)
        print(summary.line())
        return 0 if summary.ok else 1
    if args.kind is None:
        raise SystemExit("publish needs an event (follow/unfollow/post) or --file")
    fields: dict[str, object] = {"type": args.kind}
    if args.kind == "post":
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


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()

    def handler(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger("fanout").info("signal %d: finishing the current batch", signum)
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return stop


def cmd_consume(args: argparse.Namespace, settings: Settings) -> int:
    from fanout.consume_command import run_consume

    if args.batch_size:
        field = "graph_batch_size" if args.which == "graph" else "batch_size"
        settings = settings.model_copy(update={field: args.batch_size})
    stop = _stop_on_signals()
    return run_consume(settings, args.which, stop, args.until_idle, args.metrics_port, err_console)


def cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    from fanout.replay_command import parse_start, run_replay

    start = parse_start(args.from_beginning, args.from_offsets, args.from_time)
    return run_replay(settings, args.which, start, args.until_idle, err_console)


def cmd_members(args: argparse.Namespace, settings: Settings) -> int:
    kind = ListKind.FOLLOWERS if args.command == "followers" else ListKind.FOLLOWING
    store = wiring.edge_store(settings)
    lists = wiring.list_store(settings, store)
    refs = [ListRef(kind, u) for u in _ids(args.users)]
    found = lists.read_many(refs)
    for ref in refs:
        members = sorted(found[ref])
        if args.json:
            line = {"user": ref.user, args.command: members, "count": len(members)}
            sys.stdout.write(orjson.dumps(line).decode() + "\n")
        else:
            print(f"{ref.user} ({len(members)}): {' '.join(members)}")
    return 0


def cmd_timeline(args: argparse.Namespace, settings: Settings) -> int:
    (user,) = _ids([args.user])
    store = wiring.edge_store(settings)
    try:
        page = wiring.timeline_reader(settings, store).page(user, args.limit, args.before)
    except BadCursor as exc:
        raise SystemExit(f"--before: {exc}") from None
    entries, cursor = page.entries, page.next
    if args.json:
        posts = [{"post_id": e.post_id, "author": e.author, "ts": e.ts} for e in entries]
        body = {"user": user, "posts": posts, "next": cursor}
        sys.stdout.write(orjson.dumps(body).decode() + "\n")
    else:
        for e in entries:
            print(f"{e.ts}  {e.author:<20} {e.post_id}")
        if cursor is not None:
            print(f"next page: --before {cursor}")
    return 0


def cmd_rebuild(args: argparse.Namespace, settings: Settings) -> int:
    store = wiring.edge_store(settings)
    lists = wiring.list_store(settings, store)
    users = _ids(args.users) if args.users else list(store.users())
    with Progress(console=err_console, disable=not err_console.is_terminal) as progress:
        task = progress.add_task("rebuilding lists", total=len(users))
        for i in range(0, len(users), 200):  # a batch's store reads stay well inside a claim
            chunk = users[i : i + 200]
            refs = [
                ListRef(kind, u) for u in chunk for kind in (ListKind.FOLLOWERS, ListKind.FOLLOWING)
            ]
            lists.invalidate(refs)
            lists.rebuild_many(refs)
            # Timelines are regenerated by their next reader, from these lists' store.
            lists.invalidate(ListRef(ListKind.TIMELINE, u) for u in chunk)
            progress.advance(task, len(chunk))
    err_console.print(f"rebuilt the lists of {len(users)} users")
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from fanout.demo import run_demo

    return run_demo(settings, args.users, args.events, args.posts, console)


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from fanout.serve_command import check_config, run_serve

    if refused := check_config(args.host):
        err_console.print(f"[red]serve:[/red] {refused}")
        return 2
    return run_serve(args.host, args.port, args.workers, args.verbose)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fanout", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO")
    parser.add_argument(
        "--log-format",
        choices=["text", "json"],
        default="text",
        help="json: one object per line, at INFO (one line per batch)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("stack", help="the local stack (Apache Kafka or Tansu + 2 memcached)")
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
    p.set_defaults(run=cmd_stack)

    p = sub.add_parser("topics", help="create the topics")
    p.add_argument("action", choices=["create"])
    p.add_argument("--partitions", type=int)
    p.set_defaults(run=cmd_topics)

    p = sub.add_parser("publish", help="publish events")
    p.add_argument("kind", nargs="?", choices=["follow", "unfollow", "post"])
    p.add_argument("a", nargs="?", help="follower (follow/unfollow) or author (post)")
    p.add_argument("b", nargs="?", help="followee (follow/unfollow) or post id (post)")
    p.add_argument("--text")
    p.add_argument("--group")
    p.add_argument("--file", help="one JSON event per line; - for stdin")
    p.add_argument(
        "--rejects", metavar="FILE", help='--file: write {"line": N, "reason": ...} per bad line'
    )
    p.set_defaults(run=cmd_publish)

    p = sub.add_parser("consume", help="run a consumer")
    p.add_argument("which", choices=["graph", "fanout"])
    p.add_argument("--until-idle", type=float, metavar="SECONDS")
    p.add_argument("--batch-size", type=int)
    p.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port")
    p.set_defaults(run=cmd_consume)

    p = sub.add_parser("replay", help="re-consume a topic under a dedicated group")
    p.add_argument("which", choices=["graph", "fanout"])
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="the default")
    start.add_argument("--from-offsets", metavar="FILE", help='JSON {"partition": offset}')
    start.add_argument("--from-time", metavar="ISO8601", help="e.g. 2026-11-21T07:00:00Z")
    p.add_argument("--until-idle", type=float, default=5.0, metavar="SECONDS")
    p.set_defaults(run=cmd_replay)

    for name in ("followers", "following"):
        p = sub.add_parser(name, help=f"read {name} lists (rebuilt from the edge store on a miss)")
        p.add_argument("users", nargs="+")
        p.add_argument("--json", action="store_true")
        p.set_defaults(run=cmd_members)

    p = sub.add_parser("timeline", help="a user's home timeline, newest first")
    p.add_argument("user")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument(
        "--before", metavar="CURSOR", help="start after this entry (a cursor printed by a read)"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_timeline)

    p = sub.add_parser("rebuild-cache", help="rebuild lists from the edge store")
    p.add_argument("users", nargs="*")
    p.set_defaults(run=cmd_rebuild)

    p = verify_command.add_parser(sub)
    p.set_defaults(run=lambda args, settings: verify_command.cmd_verify(args, settings, console))

    p = sub.add_parser("serve", help="the HTTP API (docs/http-api.md)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--workers", type=int, default=1)
    p.set_defaults(run=cmd_serve)

    p = sub.add_parser("demo", help="the main job on the local stack")
    p.add_argument("--users", type=int, default=200)
    p.add_argument("--events", type=int, default=5000)
    p.add_argument("--posts", type=int, default=2000)
    p.set_defaults(run=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # a usage error: argparse has printed it; add the dash-id hint
        hint = dash_id_hint(sys.argv[1:] if argv is None else argv) if exc.code == 2 else None
        if hint:
            sys.stderr.write(hint + "\n")
        raise
    logs.configure(args.verbose or args.log_format == "json", args.log_format)
    run: Callable[[argparse.Namespace, Settings], int] = args.run
    try:
        return run(args, Settings())
    except stack.StackError as exc:
        err_console.print(f"[red]stack:[/red] {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
