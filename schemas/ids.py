"""User and post identifiers.

Follower lists in memcached encode members as space-separated ``+id`` / ``-id`` tokens and
memcached keys embed ids, so an id is the one piece of user input that reaches both. Restricting
ids to a small alphabet without whitespace, control bytes or ``+`` makes token and key injection
impossible by construction rather than by escaping.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import StringConstraints

ID_ALPHABET = "A-Za-z0-9_.:@-"
ID_MAX_LEN = 64
ID_RULE = f"1..{ID_MAX_LEN} characters from [{ID_ALPHABET}]"
# pydantic compiles this with Rust's regex, where `$` only matches at the very end of the text.
ID_PATTERN = f"^[{ID_ALPHABET}]{{1,{ID_MAX_LEN}}}$"
_ID_RE = re.compile(f"[{ID_ALPHABET}]{{1,{ID_MAX_LEN}}}")

Id = Annotated[str, StringConstraints(strict=True, pattern=ID_PATTERN)]


def is_valid_id(value: object) -> bool:
    """Cheap check for code paths that take ids outside an event (CLI arguments, queries)."""
    return isinstance(value, str) and _ID_RE.fullmatch(value) is not None
