"""Topic names are part of the wire contract shared by producers and consumers, and so is which
event types each topic carries.

Apps write ``PREFIX.graph`` (follow, unfollow, user_removed) and ``PREFIX.posts`` (post,
post_deleted) only.
``PREFIX.fanout-tasks`` is internal: the fan-out consumer writes chunk tasks there and trusts
them (a task names the followers to deliver to), so a task is accepted from that topic alone —
a ``fanout_task`` found on the posts topic is dead-lettered, never applied. ``PREFIX.dlq`` is
written by the consumers only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from pydantic import BaseModel

from timeline_fanout.schemas.codec import AnyEvent, EventDecodeError
from timeline_fanout.schemas.events import (
    FanoutTask,
    Follow,
    Post,
    PostDeleted,
    Unfollow,
    UserRemoved,
)

GRAPH_TYPES: tuple[type[BaseModel], ...] = (Follow, Unfollow, UserRemoved)
POST_TYPES: tuple[type[BaseModel], ...] = (Post, PostDeleted)
TASK_TYPES: tuple[type[BaseModel], ...] = (FanoutTask,)
APP_TYPES: tuple[type[BaseModel], ...] = GRAPH_TYPES + POST_TYPES  # what apps may publish
INTERNAL_TYPES: tuple[type[BaseModel], ...] = TASK_TYPES  # published by the consumers only


@dataclass(frozen=True, slots=True)
class Topics:
    """The four topic names under one prefix, and which topic each event goes to.

    The prefix isolates deployments (and test runs) sharing one cluster: every name is
    ``PREFIX.something``, so two prefixes never share a topic.

    Attributes:
        prefix: The first part of every name (``FANOUT_TOPIC_PREFIX``).

    Example:
        >>> topics = Topics("staging")
        >>> topics.graph, topics.posts
        ('staging.graph', 'staging.posts')
        >>> from timeline_fanout.schemas import Post
        >>> topics.for_event(Post(type="post", author="ann", post_id="p1"))
        'staging.posts'
    """

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

    def accepted(self) -> dict[str, tuple[type[BaseModel], ...]]:
        """The event classes each consumed topic admits; a topic not listed admits none."""
        return {self.graph: GRAPH_TYPES, self.posts: POST_TYPES, self.fanout_tasks: TASK_TYPES}

    def for_event(
        self, event: Follow | Unfollow | Post | PostDeleted | UserRemoved | FanoutTask
    ) -> str:
        """The topic ``event`` is published on: graph changes share one topic (ordered per
        followee by their key), posts and deletions another, fan-out tasks their own.

        Args:
            event: A validated event.

        Returns:
            The topic's full name.
        """
        if isinstance(event, Post | PostDeleted):
            return self.posts
        if isinstance(event, FanoutTask):
            return self.fanout_tasks
        return self.graph


def type_names(classes: tuple[type[BaseModel], ...]) -> list[str]:
    """The wire names (``type`` values) of event classes."""
    return [get_args(cls.model_fields["type"].annotation)[0] for cls in classes]


def admit(event: AnyEvent, allowed: tuple[type[BaseModel], ...], who: str) -> AnyEvent:
    """``event`` if its type is one that ``who`` may publish; otherwise an ``EventDecodeError``
    on the ``type`` field that names what is allowed."""
    if isinstance(event, allowed):
        return event
    why = "internal: " if isinstance(event, INTERNAL_TYPES) else ""
    names = ", ".join(type_names(allowed))
    raise EventDecodeError(
        f"{event.type} events are {why}not published by {who} (allowed: {names})", "type"
    )
