from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")

def decode_list(chunks: list[bytes], /) -> tuple[frozenset[str], int] | None: ...
def user_keys(prefix: str, users: Sequence[str], /) -> list[bytes] | None: ...
def valid_fanout_task(
    author: str, post_id: str, post_ts: int, chunk: int, followers: list[str], /
) -> bool: ...
def write_fanout_task(
    event_id: str | None,
    ts: int | None,
    v: int | None,
    author: str,
    post_id: str,
    post_ts: int,
    chunk: int,
    followers: list[str],
    /,
) -> bytes | None: ...
def read_fanout_task(
    payload: bytes, /
) -> tuple[str, int, str, str, int, int, list[str]] | None: ...
def take_values(
    buf: bytes,
    pos: int,
    count: int,
    found: list[Any],
    writable: bool,
    stamp: bytes,
    item: type[tuple[Any, ...]],
    /,
) -> tuple[int, int]: ...
def by_owner(owners: list[int], count: int, column: Sequence[T], /) -> list[list[T]] | None: ...
def winners(prefixes: list[bytes], families: Sequence[bytes], /) -> list[int] | None: ...
def families(keys: Sequence[bytes], /) -> list[bytes] | None: ...
