"""User and post identifiers.

Follower lists in memcached encode members as space-separated ``+id`` / ``-id`` tokens and
memcached keys embed ids, so an id is the one piece of user input that reaches both. Restricting
ids to a small alphabet without whitespace, control bytes or ``+`` makes token and key injection
impossible by construction rather than by escaping.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Annotated

from pydantic import StringConstraints, WithJsonSchema

ID_ALPHABET = "A-Za-z0-9_.:@-"
ID_MAX_LEN = 64
ID_RULE = f"1..{ID_MAX_LEN} characters from [{ID_ALPHABET}]"
_ID_RE = re.compile(f"[{ID_ALPHABET}]{{1,{ID_MAX_LEN}}}")
_IDS_RE = re.compile(f"[{ID_ALPHABET}]{{1,{ID_MAX_LEN}}}(?: [{ID_ALPHABET}]{{1,{ID_MAX_LEN}}})*")


def charset(alphabet: str, max_len: int) -> StringConstraints:
    """Strict string over a character class; pydantic compiles the pattern with Rust's regex,
    where ``$`` only matches at the very end of the text."""
    return StringConstraints(strict=True, pattern=f"^[{alphabet}]{{1,{max_len}}}$")


def charset_schema(alphabet: str, max_len: int, rule: str) -> WithJsonSchema:
    """The published form of ``charset``: Python's ``re`` (used by the Python jsonschema package)
    lets ``$`` match before a final newline, so the pattern adds a lookahead against it."""
    portable = f"^[{alphabet}]{{1,{max_len}}}(?!\\n)$"
    return WithJsonSchema({"type": "string", "pattern": portable, "description": rule})


ID_PATTERN = f"^[{ID_ALPHABET}]{{1,{ID_MAX_LEN}}}$"
Id = Annotated[
    str, charset(ID_ALPHABET, ID_MAX_LEN), charset_schema(ID_ALPHABET, ID_MAX_LEN, ID_RULE)
]


def is_valid_id(value: object) -> bool:
    """Cheap check for code paths that take ids outside an event (CLI arguments, queries)."""
    return isinstance(value, str) and _ID_RE.fullmatch(value) is not None


def all_valid_ids(values: Collection[str]) -> bool:
    """``is_valid_id`` for every value, in one regex match over the values joined by spaces (a
    fan-out builds keys for thousands of followers at a time). The space count rules out a
    value with a space in it passing as two ids."""
    if not values:
        return True
    try:
        joined = " ".join(values)
    except TypeError:  # not all strings
        return False
    return joined.count(" ") == len(values) - 1 and _IDS_RE.fullmatch(joined) is not None
