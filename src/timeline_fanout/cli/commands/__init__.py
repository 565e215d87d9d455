"""One module per ``fanout`` command. Each registers its parser with ``add_parser``, which sets
``run(args, settings) -> exit status`` as the parser's default; ``COMMANDS`` is the order of
``fanout --help``. A command's heavy imports (uvicorn for ``serve``, the demo's) wait until it
runs, so that every other command starts without them."""

from __future__ import annotations

from typing import Protocol

from timeline_fanout.cli.commands import (
    consume,
    demo,
    members,
    posts,
    publish,
    rebuild_cache,
    replay,
    ring,
    serve,
    stack,
    timeline,
    topics,
    verify,
)
from timeline_fanout.cli.commands.base import Subcommands


class Command(Protocol):
    def add_parser(self, sub: Subcommands) -> None: ...


COMMANDS: tuple[Command, ...] = (
    stack,
    topics,
    publish,
    consume,
    replay,
    members,
    timeline,
    posts,
    rebuild_cache,
    verify,
    ring,
    serve,
    demo,
)
