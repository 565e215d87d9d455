"""Post texts known under a deletion mark: what lets a page skip reading body items.

Why a text remembered with mark M may be shown by a later read whose first multi-GET found M,
and is never a post deleted before that read began, is argued in graph/timelines/post_bodies.py.
This is the memory itself. The product keeps one per process (cli/wiring.py), shared by its
``PostBodies``, so that a text one thread read saves the others reading it; whoever needs reads
that owe nothing to earlier ones (a test, each explorer run) gives its bodies a new one.
"""

from __future__ import annotations

from collections.abc import Mapping

# KNOWN_MAX texts at most (emptied when full): ~25 MiB at 140-character texts.
KNOWN_MAX = 65536

# (the deletion mark read before the text, the ``Fresh.monotonic`` it is read again after, text)
Known = tuple[bytes, float, str | None]


class KnownTexts:
    """Live texts by body key, each with the mark it is known under and until when. Safe to
    share between threads: a lookup and a store are one dict operation each, and emptying it
    when full only loses knowledge (a lost text is read from its item again)."""

    def __init__(self) -> None:
        self._texts: dict[bytes, Known] = {}

    @property
    def texts(self) -> Mapping[bytes, Known]:
        return self._texts

    def remember(self, texts: Mapping[bytes, str | None], mark: bytes, until: float) -> None:
        """``texts`` (by body key) read live after a first multi-GET that found ``mark``, to be
        used by reads that find ``mark`` until ``until``."""
        if len(self._texts) + len(texts) > KNOWN_MAX:
            self._texts.clear()
        for key, text in texts.items():
            self._texts[key] = (mark, until, text)
