"""Followers built through the real graph path (the graph applier: edge store, then lists),
in-process so that a million follows take minutes, not the broker's time."""

from __future__ import annotations

from collections.abc import Iterator

from timeline_fanout.consumers import Origin, Positioned
from timeline_fanout.consumers.graph_apply import GraphApplier
from timeline_fanout.schemas import Follow

BATCH = 10_000


def follows(author: str, n: int, first_pos: int = 1) -> Iterator[list[Positioned]]:
    batch: list[Positioned] = []
    for i in range(n):
        event = Follow(type="follow", follower=f"f{i}", followee=author)
        batch.append(Positioned(event, first_pos + i, Origin("bench", 0, i, None), b""))
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def build_followers(applier: GraphApplier, author: str, n: int) -> None:
    for batch in follows(author, n):
        applier.apply(batch)
