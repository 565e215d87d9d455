"""The operations a memcached cluster offers the layers above it, as a Protocol.

The token lists and timelines are written against ``Cache``, not against ``MemcacheCluster``,
so that another implementation can stand in without touching the client's internals: the
event loop's timeline reader answers multi-GETs from a record and refuses every other
exchange (graph/timelines/warm_reads.py). Every write's outcome is a named ``Outcome``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from timeline_fanout.memcache.wire import AppendGroup, Item, Outcome, Refused


class Cache(Protocol):
    def available(self, keys: Sequence[bytes]) -> list[bool]:
        """Per key, whether its server may be used now (memcache/trust.py); a read answers the
        others from the edge store and writes nothing for them."""
        ...

    def checkpoint(self) -> int:
        """A mark to pass to ``missed``, taken before a write begins."""
        ...

    def missed(self, keys: Sequence[bytes], since: int) -> None:
        """A writer skipped ``keys``: each whose server left an exchange unanswered since
        ``since`` (a ``checkpoint``) or is unavailable now missed writes, and that server must
        never serve its items again (``CacheUnavailable`` if nothing can record that)."""
        ...

    def fills(self) -> Cache:
        """The same cache for a reader's best-effort writes: a write to a key moving between
        servers is answered as refused (NOT_STORED, NOT_FOUND) instead of raising
        ``KeysMoving``."""
        ...

    def wait(self, seconds: float) -> None:
        """Before asking again for items someone else is writing (a list being built)."""
        ...

    def gets_many(self, keys: Iterable[bytes]) -> dict[bytes, Item]:
        """Items with their CAS ids and time to live; a missing key is left out."""
        ...

    def get_many(self, keys: Iterable[bytes]) -> dict[bytes, bytes]: ...

    def add_many(self, values: Mapping[bytes, bytes], expire: int = 0) -> dict[bytes, Outcome]:
        """STORED where the key was created; NOT_STORED where it already existed."""
        ...

    def append_many(self, values: Mapping[bytes, bytes]) -> dict[bytes, Outcome]: ...

    def append_to_each(self, groups: Sequence[AppendGroup]) -> list[Refused]:
        """Each group's value appended to each of its keys: a ``Refused`` (group index, key,
        outcome) for each append that was not stored, and nothing for those that were."""
        ...

    def set_many(self, values: Mapping[bytes, bytes], expire: int = 0) -> dict[bytes, Outcome]: ...

    def cas_many(
        self, values: Mapping[bytes, tuple[bytes, bytes]], expire: int | Mapping[bytes, int] = 0
    ) -> dict[bytes, Outcome]: ...

    def cas(self, key: bytes, value: bytes, cas_id: bytes, expire: int = 0) -> Outcome: ...

    def delete_if_unchanged(self, items: Mapping[bytes, bytes]) -> dict[bytes, Outcome]: ...

    def incr_many(self, deltas: Mapping[bytes, int]) -> dict[bytes, int | None]: ...

    def decr_many(self, deltas: Mapping[bytes, int]) -> None: ...

    def exists_many(self, keys: Iterable[bytes]) -> dict[bytes, bool]: ...

    def delete_many(self, keys: Iterable[bytes]) -> None: ...

    def versions(self) -> dict[str, str]:
        """The version of every server that answers (``CacheUnavailable`` when none does): a
        readiness probe that touches no key."""
        ...

    def close(self) -> None: ...
