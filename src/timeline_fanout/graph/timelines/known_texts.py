"""Post texts known under a deletion mark: what lets a page skip reading body items.

Why a text remembered with mark M may be shown by a later read whose first multi-GET found M,
and is never a post deleted before that read began, is argued in graph/timelines/post_bodies.py.
This is the memory itself. The product keeps one per process (cli/wiring.py), shared by its
``PostBodies``, so that a text one thread read saves the others reading it; whoever needs reads
that owe nothing to earlier ones (a test, each explorer run) gives its bodies a new one.

A text is known under each mark it was read after, not only the last: readers ask different
copies of the mark (one of ``ITEM_COPIES`` by a hash of the reader), and the copies hold
different values (each ADDed fresh when absent, each SET fresh by a deletion). Keeping one mark
per text made the readers of two copies forget each other's texts at every read, so every page
read its bodies again. The argument holds mark by mark, so a text known under several is shown
to a read that found any one of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from timeline_fanout.graph.model.keys import ITEM_COPIES

# KNOWN_MAX texts at most (emptied when full): ~25 MiB at 140-character texts, plus the marks.
KNOWN_MAX = 65536
# Marks kept per text: one per copy of the mark; a text read under one more starts afresh
# (the older marks are those of copies that changed since).
MARKS_PER_TEXT = ITEM_COPIES


@dataclass(slots=True)
class KnownText:
    """A live text and the marks it is known under, each with the ``Fresh.monotonic`` time
    after which it is read again."""

    text: str | None
    marks: dict[bytes, float] = field(default_factory=dict)


class KnownTexts:
    """Live texts by body key. Safe to share between threads: a lookup and a store are one
    dict operation each, and emptying it when full only loses knowledge (a lost text is read
    from its item again)."""

    def __init__(self) -> None:
        self._texts: dict[bytes, KnownText] = {}

    def texts(self, keys: Iterable[bytes], mark: bytes, now: float) -> dict[bytes, str | None]:
        """The texts of those body ``keys`` known under ``mark`` until after ``now``, by key
        (one call a page: the lookup of each of its entries is two dict reads)."""
        known = self._texts
        found: dict[bytes, str | None] = {}
        for key in keys:
            text = known.get(key)
            if text is not None and text.marks.get(mark, 0.0) > now:
                found[key] = text.text
        return found

    def remember(self, texts: dict[bytes, str | None], mark: bytes, until: float) -> None:
        """``texts`` (by body key) read live after a first multi-GET that found ``mark``, to be
        used by reads that find ``mark`` until ``until``."""
        if len(self._texts) + len(texts) > KNOWN_MAX:
            self._texts.clear()
        for key, text in texts.items():
            known = self._texts.get(key)
            if known is None or known.text != text or len(known.marks) >= MARKS_PER_TEXT:
                self._texts[key] = KnownText(text, {mark: until})
            else:
                known.marks[mark] = until
