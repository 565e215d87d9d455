"""The ``fanout`` command: global options, the commands' parsers (cli/commands/) and
dispatch; the work lives in the packages."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from collections.abc import Callable, Sequence

from confluent_kafka import KafkaException
from pymongo.errors import PyMongoError

from timeline_fanout.cli import logs
from timeline_fanout.cli.cli_help import DESCRIPTION, EPILOG, dash_id_hint
from timeline_fanout.cli.commands import COMMANDS
from timeline_fanout.cli.commands.base import err_console
from timeline_fanout.cli.recorded_settings import load_settings
from timeline_fanout.cli.settings import Settings
from timeline_fanout.memcache import CacheUnavailable
from timeline_fanout_devstack.stack import StackError


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
    for command in COMMANDS:
        command.add_parser(sub)
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
        return run(args, load_settings())
    except StackError as exc:
        err_console.print(f"[red]stack:[/red] {exc}")
        return 2
    except Exception as exc:
        service = unavailable_service(exc)
        if service is None:
            raise
        err_console.print(f"[red]{service} unavailable:[/red] {exc}", highlight=False)
        return SERVICE_UNAVAILABLE


# A command that could not reach memcached, the edge store or the broker: said in one line.
SERVICE_UNAVAILABLE = 6


def unavailable_service(exc: BaseException) -> str | None:
    """Which service ``exc`` says is unreachable (or broken), or None for anything else (a bug
    of ours: its traceback is wanted)."""
    if isinstance(exc, CacheUnavailable):
        return "cache"
    if isinstance(exc, sqlite3.Error | PyMongoError):
        return "edge store"
    if isinstance(exc, KafkaException):
        return "broker"
    return None


if __name__ == "__main__":
    sys.exit(main())
