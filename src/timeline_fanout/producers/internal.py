"""``InternalPublisher``: how the consumers publish the internal events apps may not.

The fan-out consumer shares a big author's delivery out as ``fanout_task`` chunks on
``PREFIX.fanout-tasks``, and the consumers of that topic trust a task's follower list. Apps
therefore cannot publish tasks (``EventPublisher`` refuses them, and the posts topic dead-letters
one), and this publisher, used only by the consumers, publishes tasks and nothing else: the one
place an internal event enters Kafka is explicit, and in production it is the only principal
with WRITE on the task topic (docs/operations.md, Security).
"""

from __future__ import annotations

from timeline_fanout.producers.publisher import EventPublisher
from timeline_fanout.schemas import AnyEvent
from timeline_fanout.schemas.topics import INTERNAL_TYPES, admit


class InternalPublisher(EventPublisher):
    def _admit(self, event: AnyEvent) -> AnyEvent:
        return admit(event, INTERNAL_TYPES, "the consumers' task publisher")
