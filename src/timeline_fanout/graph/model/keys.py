"""List references and the memcached keys they live under.

Every key is ``{namespace}|{kind}|{user}`` followed by ``|``-separated parts of hex or fixed
words (generation, shard, ``n`` for a counter). ``|`` is outside the id alphabet and outside the
namespace's, so splitting a key on ``|`` gives back exactly the parts it was built from: key
construction is injective. (It was not with ``:``, which ids may hold: user ``x:rb``'s list key
was user ``x``'s lease key, so any user could wedge any other's lists.)
"""

from __future__ import annotations

import enum
import re
import zlib
from collections.abc import Sequence
from typing import NamedTuple

from timeline_fanout.memcache.ring import leading_parts, leading_parts_reference
from timeline_fanout.native_core import core
from timeline_fanout.schemas import all_valid_ids, is_valid_id

SEP = b"|"
# Copies of the items every page reads (the deletion mark, the celebrity set): enough that
# each is read by a small share of the pages and spread over the servers; few enough that a
# writer sets them all in one pipelined write.
ITEM_COPIES = 16
CELEBRITY_POSTS = "cp"
AUTHOR_POSTS = "ap"
COUNTS = "ct"
COUNT_LEASES = "cl"
# memcached keys: printable ASCII without spaces, at most 250 bytes. The namespace is a setting,
# not user input, but it is checked all the same: it must not hold the separator.
_NAMESPACE_RE = re.compile(r"[A-Za-z0-9_.:@-]{1,32}")


class ListKind(enum.Enum):
    FOLLOWERS = "fl"
    FOLLOWING = "fg"
    TIMELINE = "tl"

    # Members are singletons: identity hashing, in C (Enum's own __hash__ is Python code, and
    # list references are hashed several times per event on the ingest path).
    __hash__ = object.__hash__


class ListRef(NamedTuple):
    """One list: a tuple, so hashing and comparing it in the hot dicts runs in C."""

    kind: ListKind
    user: str


class KeySpace:
    """Builds every key of one namespace, and says how the cache places them (``families``)."""

    # How the cache places keys (memcache/ring.py): by their first three parts, so every key
    # named after one user (a list's head, shards and counters) is on one server.
    families = staticmethod(leading_parts)
    families_reference = staticmethod(leading_parts_reference)

    def __init__(self, namespace: str) -> None:
        if not _NAMESPACE_RE.fullmatch(namespace):
            raise ValueError(f"cache namespace {namespace!r}: 1..32 of [A-Za-z0-9_.:@-]")
        self.namespace = namespace
        self._copies: dict[str, tuple[bytes, ...]] = {}  # ``copies``, made once per name

    def list_keys(self, kind: ListKind, users: Sequence[str]) -> list[bytes]:
        """The lists' keys, built only from valid ids (a key is the other place user input
        reaches memcached); for many users at C speed: one check, one join, one split."""
        return self._user_keys(kind.value, users)

    def celebrity_posts_keys(self, users: Sequence[str]) -> list[bytes]:
        """``{ns}|cp|{user}``: a celebrity's recent posts (graph/timelines/celebrity_posts.py).
        ``cp`` is no list kind, so these never meet a list's keys."""
        return self._user_keys(CELEBRITY_POSTS, users)

    def author_posts_keys(self, users: Sequence[str]) -> list[bytes]:
        """``{ns}|ap|{user}``: an author's newest posts (graph/timelines/author_pages.py)."""
        return self._user_keys(AUTHOR_POSTS, users)

    def count_keys(self, users: Sequence[str]) -> list[bytes]:
        """``{ns}|ct|{user}``: a user's follower and following counts (graph/lists/counts.py)."""
        return self._user_keys(COUNTS, users)

    def count_lease_keys(self, users: Sequence[str]) -> list[bytes]:
        """``{ns}|cl|{user}``: who counts a user's stale count (graph/lists/counts.py)."""
        return self._user_keys(COUNT_LEASES, users)

    def _user_keys(self, code: str, users: Sequence[str]) -> list[bytes]:
        """``{ns}|{code}|{user}`` for every user: by the native core where it runs
        (timeline_fanout/native_core.py); by ``user_keys_reference`` where it does not, and for a
        batch the core does not name itself (an invalid id: the reference's error)."""
        if core is not None:
            keys = core.user_keys(f"{self.namespace}|{code}|", users)
            if keys is not None:
                return keys
        return self.user_keys_reference(code, users)

    def user_keys_reference(self, code: str, users: Sequence[str]) -> list[bytes]:
        if not all_valid_ids(users):
            bad = next(u for u in users if not is_valid_id(u))
            raise ValueError(f"invalid user id {bad!r}")
        if not users:
            return []
        prefix = f"{self.namespace}|{code}|"
        return (prefix + (" " + prefix).join(users)).encode("ascii").split(b" ")

    def deletions_key(self, reader: str) -> bytes:
        """The copy of the deletion mark ``reader``'s pages ask (``{ns}|deletions|{n}``): set to
        a fresh value after every deletion of a post (graph/timelines/post_bodies.py, the page
        memo's guard)."""
        return self.copy_for("deletions", reader)

    def copy_for(self, name: str, reader: str) -> bytes:
        """The copy of the item ``name``, kept in ``ITEM_COPIES`` copies, that ``reader``'s
        pages ask: ``{ns}|{name}|{n}``, by a hash of the reader. An item every page needs is
        kept this way so that no key is on every read and a server lost takes only its copies'
        readers to the store; writers write every copy (``copies``)."""
        return self.copies(name)[zlib.crc32(reader.encode("ascii")) % ITEM_COPIES]

    def copies(self, name: str) -> tuple[bytes, ...]:
        """Every copy of the item ``name`` (see ``copy_for``): made once, as every page asks
        one (a tuple: the callers share it)."""
        made = self._copies.get(name)
        if made is None:
            made = tuple(f"{self.namespace}|{name}|{n}".encode("ascii") for n in range(ITEM_COPIES))
            self._copies[name] = made
        return made

    def celebrities_key(self, reader: str) -> bytes:
        """The copy of the celebrity set ``reader``'s pages ask (``{ns}|celebrities|{n}``)."""
        return self.copy_for("celebrities", reader)

    def list_key(self, ref: ListRef) -> bytes:
        return self.list_keys(ref.kind, [ref.user])[0]

    def ref_keys(self, refs: Sequence[ListRef]) -> list[bytes]:
        """``list_key`` of many lists, in order: one ``list_keys`` per kind."""
        keys: list[bytes] = [b""] * len(refs)
        for kind in {ref.kind for ref in refs}:
            at = [i for i, ref in enumerate(refs) if ref.kind is kind]
            for i, key in zip(at, self.list_keys(kind, [refs[i].user for i in at]), strict=True):
                keys[i] = key
        return keys


def shard_key(list_key: bytes, gen: bytes, shard: bytes) -> bytes:
    """Shard ``shard`` of generation ``gen`` (both hex or fixed words, never ``|``)."""
    return list_key + SEP + gen + SEP + shard


def counter_key(shard: bytes) -> bytes:
    """The bytes reserved in a shard (INCR), which tells a writer when to roll over."""
    return shard + b"|n"
