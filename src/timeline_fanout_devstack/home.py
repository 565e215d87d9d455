"""Where the local stack keeps its state: one directory per checkout unless FANOUT_HOME says."""

from __future__ import annotations

import os
from pathlib import Path


def fanout_home() -> Path:
    """The stack's directory (logs, data, state file); relative paths resolve against the
    working directory, so each checkout has its own stack."""
    return Path(os.environ.get("FANOUT_HOME", ".fanout")).resolve()


def stack_file() -> Path:
    """The state file: the addresses of the running services, read by the settings."""
    return fanout_home() / "stack.json"
