"""Topic names are part of the wire contract shared by producers and consumers."""

from __future__ import annotations

from dataclasses import dataclass

from schemas.events import Follow, Post, Unfollow, UserRemoved


@dataclass(frozen=True, slots=True)
class Topics:
    prefix: str = "fanout"

    @property
    def graph(self) -> str:
        return f"{self.prefix}.graph"

    @property
    def posts(self) -> str:
        return f"{self.prefix}.posts"

    @property
    def dlq(self) -> str:
        return f"{self.prefix}.dlq"

    def all(self) -> list[str]:
        return [self.graph, self.posts, self.dlq]

    def for_event(self, event: Follow | Unfollow | Post | UserRemoved) -> str:
        return self.posts if isinstance(event, Post) else self.graph
