"""``fanout serve``: the HTTP API on uvicorn (cli/api_server.py), refused on a non-loopback
address without authentication."""

from __future__ import annotations

import argparse

from timeline_fanout.cli.commands.base import Subcommands, err_console
from timeline_fanout.cli.settings import Settings


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("serve", help="the HTTP API (docs/http-api.md)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--workers", type=int, default=1)
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from timeline_fanout.cli.api_server import (  # uvicorn and the app: only to serve
        check_config,
        run_serve,
    )

    if refused := check_config(args.host):
        err_console.print(f"[red]serve:[/red] {refused}")
        return 2
    return run_serve(args.host, args.port, args.workers, args.verbose)
