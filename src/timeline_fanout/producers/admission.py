"""Which event types a publisher may send: the policy an ``EventPublisher`` is given.

Apps may not publish internal events (a ``fanout_task`` carries a follower list its consumers
trust), so the publisher apps use admits app types only, and the consumers' own publisher
admits tasks only. The policy is a value handed to the publisher rather than a method a
subclass overrides, so what a publisher admits is visible where it is built, and the HTTP API
judges a posted event by the same value the publisher it sends through holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel

from timeline_fanout.schemas import AnyEvent
from timeline_fanout.schemas.topics import APP_TYPES, INTERNAL_TYPES, admit


class AdmissionPolicy(Protocol):
    def admit(self, event: AnyEvent) -> AnyEvent:
        """``event`` if it may be published; raises ``EventDecodeError`` on its ``type`` field
        otherwise. Called before anything is queued, so a refused event never reaches Kafka."""
        ...


@dataclass(frozen=True, slots=True)
class AdmitTypes:
    """Admits events of ``types``; a refusal names ``who`` publishes and what it may send."""

    types: tuple[type[BaseModel], ...]
    who: str

    def admit(self, event: AnyEvent) -> AnyEvent:
        return admit(event, self.types, self.who)


# The default: what apps may publish (follow, unfollow, post, post_deleted, user_removed).
APP_EVENTS = AdmitTypes(APP_TYPES, "apps")
# The consumers' task publisher: fan-out chunks and nothing else.
CONSUMER_TASKS = AdmitTypes(INTERNAL_TYPES, "the consumers' task publisher")
