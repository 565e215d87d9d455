"""``InternalPublisher``: how the consumers publish the internal events apps may not.

The fan-out consumer shares a big author's delivery out as ``fanout_task`` chunks on
``PREFIX.fanout-tasks``, and the consumers of that topic trust a task's follower list. Apps
therefore cannot publish tasks (``EventPublisher`` refuses them, and the posts topic dead-letters
one), and this publisher, used only by the consumers, publishes tasks and nothing else: the one
place an internal event enters Kafka is explicit, and in production it is the only principal
with WRITE on the task topic (docs/operations.md, Security).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from timeline_fanout.producers.admission import CONSUMER_TASKS
from timeline_fanout.producers.publisher import EventPublisher
from timeline_fanout.schemas import Topics


class InternalPublisher(EventPublisher):
    """An ``EventPublisher`` whose admission is ``CONSUMER_TASKS``: the type the fan-out
    applier asks for, so that it cannot be handed a publisher of app events."""

    def __init__(
        self,
        bootstrap_servers: str,
        topics: Topics,
        extra_config: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(bootstrap_servers, topics, extra_config, admission=CONSUMER_TASKS)
