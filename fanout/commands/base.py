"""What every command shares: the consoles, the type of the subcommand registry, and the check
of user ids given on the command line."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TypeAlias

from rich.console import Console

from schemas import is_valid_id

Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

console = Console()
err_console = Console(stderr=True)


def user_ids(values: Sequence[str]) -> list[str]:
    """The ids as given, or exit with the first invalid one named (before any server is asked)."""
    bad = [v for v in values if not is_valid_id(v)]
    if bad:
        raise SystemExit(f"invalid user id {bad[0]!r}: ids are 1..64 of [A-Za-z0-9_.:@-]")
    return list(values)
