"""Which implementation of the per-member hot paths runs: the native core (``_native``, built
from native/ in Rust with PyO3 when the package is installed) or the Python reference beside
each caller (graph/lists/tokens.py's list decode and a graph batch's token encoding,
graph/model/keys.py's key naming, schemas/codec.py's chunk tasks, memcache/ring.py's placement,
memcache/router.py's split of a batch by server, memcache/wire.py's meta get replies). It sits
beside the extension, outside every layer, and imports nothing of ours, so that every layer may
use it.

Both have one meaning: the native functions answer ``None`` (or hand back a position) wherever
their input leaves the form our writers, or memcached, produce, and the caller then runs the
reference, so results and errors are the reference's own (the differential tests
``test_native_*_match_reference``). ``FANOUT_NATIVE``
chooses at import: unset, the native core where it is built and the reference elsewhere; ``0``,
the reference always (an A/B run, or to rule the core out); ``1``, the native core or an
``ImportError``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from timeline_fanout._native import MemberList as CompactMemberList
    from timeline_fanout._native import Members as CompactMembers

ENV = "FANOUT_NATIVE"
T = TypeVar("T")


class NativeCore(Protocol):
    """The native module's type and functions (stubbed in ``_native.pyi``)."""

    Members: type[CompactMembers]
    MemberList: type[CompactMemberList]

    def decode_list(
        self, chunks: list[bytes], ids: bool, /
    ) -> tuple[CompactMembers, int] | None: ...

    def user_keys(self, prefix: str, users: Sequence[str], /) -> list[bytes] | None: ...

    def valid_fanout_task(
        self, author: str, post_id: str, post_ts: int, chunk: int, followers: Sequence[str], /
    ) -> bool: ...

    def write_fanout_task(
        self,
        event_id: str | None,
        ts: int | None,
        v: int | None,
        author: str,
        post_id: str,
        post_ts: int,
        chunk: int,
        followers: Sequence[str],
        /,
    ) -> bytes | None: ...

    def read_fanout_task(
        self, payload: bytes, /
    ) -> tuple[str, int, str, str, int, int, CompactMemberList] | None: ...

    def take_values(
        self,
        buf: bytes,
        pos: int,
        count: int,
        found: list[Any],
        writable: bool,
        stamp: bytes,
        item: type[tuple[Any, ...]],
        /,
    ) -> tuple[int, int]: ...

    def winners(self, prefixes: list[bytes], families: Sequence[bytes], /) -> list[int] | None: ...

    def families(self, keys: Sequence[bytes], /) -> list[bytes] | None: ...

    def place(self, prefixes: list[bytes], keys: Sequence[bytes], /) -> list[int] | None: ...

    def edge_tokens(
        self,
        changes: list[Any],
        edge_change: type[tuple[Any, ...]],
        list_ref: type[tuple[Any, ...]],
        followers_kind: object,
        following_kind: object,
        /,
    ) -> dict[Any, bytes] | None: ...

    def by_owner(
        self, owners: list[int], count: int, column: Sequence[T], /
    ) -> list[list[T]] | None: ...


def _load() -> NativeCore | None:
    wanted = os.environ.get(ENV, "")
    if wanted == "0":
        return None
    try:
        from timeline_fanout import _native
    except ImportError:
        if wanted == "1":
            raise
        return None
    # Each is what its reference is to ``isinstance``: a set of str, a sequence of str.
    AbstractSet.register(_native.Members)
    Sequence.register(_native.MemberList)
    return _native


core = _load()
