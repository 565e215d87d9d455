"""Anti-entropy: compare cached lists and timelines with the edge store, and repair on request.

The fence and the positioned tokens make the cache a function of the store; this is how an
operator checks that claim on a live system (``fanout verify``), and the last line of defence
besides expiry. Only lists that are cached are compared (an absent list is rebuilt from the store
by its next reader, so it cannot be wrong). Writes are in flight on a live system, so a list
that differs is read again after ``settle_s`` and counted only if it still differs from the
store as read again: a divergence is what survives the consumers catching up.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from timeline_fanout.graph.lists.token_lists import ListLayout, TokenLists
from timeline_fanout.graph.lists.tokens import MemberSet, frozen
from timeline_fanout.graph.model.edges import GraphAndPosts
from timeline_fanout.graph.model.keys import ListKind, ListRef
from timeline_fanout.graph.timelines.reader import TimelineEntry, TimelineReader


@dataclass(slots=True)
class KindReport:
    checked: int = 0
    not_cached: int = 0
    divergent: int = 0
    repaired: int = 0
    examples: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Report:
    kinds: dict[ListKind, KindReport] = field(
        default_factory=lambda: {kind: KindReport() for kind in ListKind}
    )

    @property
    def divergent(self) -> int:
        return sum(k.divergent - k.repaired for k in self.kinds.values())


class AntiEntropy:
    def __init__(
        self, store: GraphAndPosts, reader: TimelineReader, cap: int, settle_s: float = 1.0
    ) -> None:
        self._store = store
        self._reader = reader
        self._follow_lists: TokenLists[ListLayout] = reader.follow_lists
        self._timelines: TokenLists[ListLayout] = reader.timelines
        self._cap = cap
        self._settle_s = settle_s

    def expected(self, ref: ListRef) -> frozenset[str]:
        """What a list must hold according to the store; for a timeline, what a reader must be
        shown: the newest ``cap`` posts of its followees (as regeneration builds it)."""
        if ref.kind is not ListKind.TIMELINE:
            return frozenset(self._store.snapshot(ref).members)
        followees = self._store.all_members(ListRef(ListKind.FOLLOWING, ref.user))
        posts = self._store.recent_posts(followees, self._cap)
        return frozenset(TimelineEntry.of(p).member for p in posts)

    def seen(self, ref: ListRef, cached: MemberSet) -> frozenset[str]:
        """What a reader is shown of a cached list (for a timeline: the reader's own view, with
        the followees as the store holds them)."""
        if ref.kind is not ListKind.TIMELINE:
            return frozen(cached)
        following = frozenset(self._store.all_members(ListRef(ListKind.FOLLOWING, ref.user)))
        return frozenset(e.member for e in self._reader.view(ref.user, cached, following))

    def check(
        self,
        users: Sequence[str],
        repair: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> Report:
        report = Report()
        suspects: list[ListRef] = []
        for kind, lists in (
            (ListKind.FOLLOWERS, self._follow_lists),
            (ListKind.FOLLOWING, self._follow_lists),
            (ListKind.TIMELINE, self._timelines),
        ):
            refs = [ListRef(kind, u) for u in users]
            cached = lists.cached_many(refs)
            report.kinds[kind].not_cached += len(refs) - len(cached)
            report.kinds[kind].checked += len(cached)
            suspects += [r for r, got in cached.items() if self.seen(r, got) != self.expected(r)]
            if progress is not None:
                progress(len(refs))
        if suspects:
            time.sleep(self._settle_s)  # let in-flight writes land
        for ref in suspects:
            lists = self._timelines if ref.kind is ListKind.TIMELINE else self._follow_lists
            again = lists.cached_many([ref]).get(ref)
            if again is None:
                continue
            want = self.expected(ref)
            got = self.seen(ref, again)
            if got == want:
                continue
            found = report.kinds[ref.kind]
            found.divergent += 1
            if len(found.examples) < 5:
                extra, missing = sorted(got - want)[:3], sorted(want - got)[:3]
                found.examples.append(f"{ref.user}: extra {extra}, missing {missing}")
            if repair:  # dropped (fenced): the next reader rebuilds it from the store
                lists.invalidate([ref])
                found.repaired += 1
        return report
