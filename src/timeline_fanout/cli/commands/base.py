"""What every command shares: the consoles, the type of the subcommand registry, the check of
user ids given on the command line, and how a page of posts is asked for and printed."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from typing import TypeAlias

import orjson
from rich.console import Console

from timeline_fanout.schemas import is_valid_id

Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

console = Console()
err_console = Console(stderr=True)


def user_ids(values: Sequence[str]) -> list[str]:
    """The ids as given, or exit with the first invalid one named (before any server is asked)."""
    bad = [v for v in values if not is_valid_id(v)]
    if bad:
        raise SystemExit(f"invalid user id {bad[0]!r}: ids are 1..64 of [A-Za-z0-9_.:@-]")
    return list(values)


def page_arguments(p: argparse.ArgumentParser) -> None:
    """``--limit``, ``--before CURSOR`` and ``--json``, as every page of posts takes them."""
    p.add_argument("--limit", type=int, default=50)
    p.add_argument(
        "--before", metavar="CURSOR", help="start after this post (a cursor printed by a read)"
    )
    p.add_argument("--json", action="store_true")


def print_page(
    args: argparse.Namespace, body: dict[str, object], lines: Iterable[str], nxt: str | None
) -> None:
    """``body`` as one JSON line with ``--json``; else ``lines`` and where the next page starts."""
    if args.json:
        sys.stdout.write(orjson.dumps(body).decode() + "\n")
        return
    for line in lines:
        print(line)
    if nxt is not None:
        print(f"next page: --before {nxt}")
