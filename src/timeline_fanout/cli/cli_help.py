"""What ``fanout --help`` says about the tool, and the hint for ids that start with ``-``.

argparse reads any ``-x`` token as an option, and ``-`` is a legal first character of an id
(schemas/ids.py). The POSIX convention settles it: everything after ``--`` is an argument
(``fanout followers -- -lead``). A bare ``-lead`` still fails, as an option argparse does not
know, and ``dash_id_hint`` adds the way out to that error.
"""

from __future__ import annotations

from collections.abc import Sequence

from timeline_fanout.schemas import is_valid_id

DESCRIPTION = (
    "timeline-fanout: keeps a social follower graph and delivers posts into home timelines. "
    "Apps publish follow, unfollow, post, post_deleted and user_removed events to Kafka; "
    "`consume graph` records every edge in the edge store and appends it to the follower lists "
    "in memcached; `consume fanout` appends each post to its author's followers' timelines and "
    "takes a deleted one out. The other commands run the local stack, publish events, read "
    "lists and timelines, and check or repair the cache."
)
EPILOG = (
    "Settings come from FANOUT_* environment variables (docs/configuration.md). An id that starts "
    "with '-' goes after '--', e.g. fanout followers -- -lead; fanout publish follow -- -a -b."
)
_SHORT_OPTIONS = {"-h", "-v"}


def dash_id_hint(argv: Sequence[str]) -> str | None:
    """The hint for a failed parse in which an id-like ``-token`` was taken for an option."""
    if "--" in argv:
        return None
    suspects = [
        a for a in argv if a.startswith("-") and not a.startswith("--") and a not in _SHORT_OPTIONS
    ]
    suspects = [a for a in suspects if is_valid_id(a)]
    if not suspects:
        return None
    return (
        f"hint: {suspects[0]} was read as an option; an id that starts with '-' goes after "
        f"'--', e.g. fanout followers -- {suspects[0]}"
    )
