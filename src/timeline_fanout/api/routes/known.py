"""404 for a user the graph does not know, 200 with an empty answer for one it knows with
nothing yet. "Known" is the edge store's rule (``known_users``: an active edge, or any edge or
post and not removed). The store is asked only when an answer is empty: a non-empty timeline or
list already proves its user has an active edge, so the hot path costs no store query."""

from __future__ import annotations

from collections.abc import Sequence

from timeline_fanout.api.backends import Backends
from timeline_fanout.api.problems import FieldError, Problem


def require_known(backends: Backends, users: Sequence[tuple[str, str]]) -> None:
    """``users`` as ``(parameter name, id)``; a 404 names every unknown one."""
    known = backends.store.known_users({user for _, user in users})
    unknown = [(name, user) for name, user in users if user not in known]
    if unknown:
        raise Problem(
            404,
            "unknown-user",
            "Unknown user",
            "; ".join(f"{name}: no user {user!r} in the graph" for name, user in unknown),
            [FieldError(name, "a user with an edge or a post, not removed") for name, _ in unknown],
        )
