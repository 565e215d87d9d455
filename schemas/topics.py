"""Topic names are part of the wire contract shared by producers and consumers."""

from __future__ import annotations

from dataclasses import dataclass

from schemas.events import FanoutTask, Follow, Post, Unfollow, UserRemoved


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

    @property
    def fanout_tasks(self) -> str:
        return f"{self.prefix}.fanout-tasks"

    def all(self) -> list[str]:
        return [self.graph, self.posts, self.dlq, self.fanout_tasks]

    def for_event(self, event: Follow | Unfollow | Post | UserRemoved | FanoutTask) -> str:
        if isinstance(event, Post):
            return self.posts
        if isinstance(event, FanoutTask):
            return self.fanout_tasks
        return self.graph
