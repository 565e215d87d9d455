"""Pipelined memcached commands for batches of keys: store commands, INCR, DELETE, meta gets.

pymemcache sends a batch of store commands in one write only through a private method, reads a
multi-get server by server, and builds and parses every key's command in Python with checks that
cost more client time than memcached needs to execute it (~4 µs a key, measured). A fan-out
writes one token to thousands of keys and the graph consumer reads and writes two lists per
event, so here a whole pipeline is built by one ``bytes.join`` and sent in one write (by a
pipe of memcache/pools.py), and every reply is read back and returned (never ``noreply``: the
outcome of each write matters). Keys
reach this module already validated. Reads use meta gets (``mg key v c``: one reply per key, in
order, so a reply needs no key to be matched).

The fan-out's appends of one short value to many keys use meta sets in quiet mode instead
(``ms key len MA q k``, the pipeline closed by ``mn``): memcached answers only the appends it
refused, each naming its key, and ``MN`` once it has executed the whole pipeline, so a stored
append costs no reply to write, read or parse and every refusal is still reported
(docs/decisions/quiet-meta-appends.md).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import NamedTuple

from timeline_fanout.native_core import core

STORED = b"STORED\r\n"
NOT_STORED = b"NOT_STORED\r\n"
TOO_LARGE = b"SERVER_ERROR object too large for cache"
# memcached's answer to incr/decr of an item that does not hold a decimal number (bytes written
# by anything but our writers): an answer about the item, the connection goes on.
NOT_A_NUMBER = b"CLIENT_ERROR cannot increment or decrement non-numeric value"
# The longest value a quiet append carries. A quiet ``ms`` too large for the server is answered
# by a ``SERVER_ERROR`` that names no key, and memcached 1.6 also unlinks the item it would
# have appended to; memcached's item size limit (``-I``) is at least 1 KB, so a key (at most
# 250 bytes) and a value this long always fit, and a longer value goes by classic ``append``.
QUIET_VALUE_MAX = 512


class Outcome(enum.Enum):
    """What memcached did with one write: a typed answer, because the callers' fencing turns on
    telling these apart (a lost CAS race is not a vanished item, a refused APPEND is not a full
    one)."""

    STORED = "STORED"  # written (for a meta delete: deleted)
    NOT_STORED = "NOT_STORED"  # ADD: the key exists; APPEND: the key is missing
    EXISTS = "EXISTS"  # CAS / fenced delete: someone changed the item since it was read
    NOT_FOUND = "NOT_FOUND"  # CAS / fenced delete: the item is gone
    TOO_LARGE = "TOO_LARGE"  # the item would pass the server's item size limit

    @property
    def ok(self) -> bool:
        return self is Outcome.STORED


class Refused(NamedTuple):
    """An append that was not stored: the index of its group (in the order the groups were
    given), the key, and memcached's answer (NOT_STORED: the key is missing, or the item is
    near the size limit; TOO_LARGE: the value alone passes the limit)."""

    group: int
    key: bytes
    outcome: Outcome


class AppendGroup(NamedTuple):
    """One value appended to many keys (a post's token to its followers' timelines): the unit
    ``Cache.append_to_each`` takes, many per pipelined exchange."""

    value: bytes
    keys: Sequence[bytes]


class CacheUnavailable(RuntimeError):
    """A memcached server did not answer, or answered out of protocol; nothing about the keys
    on it is known, and the connection is closed so the next call starts clean."""


class KeysMoving(CacheUnavailable):
    """Writes to keys moving between servers were not sent (memcache/ring.py). A writer makes
    them again once its process uses the ring's next state; a reader's fill or build is only
    left undone, and the reader answers from the store."""


# An item's time to live when the meta get did not ask for it (``writable=False``).
NOT_READ = -2


class Item(NamedTuple):
    """A cached item as a meta get returns it. One read without ``writable`` has neither its
    CAS id nor its time to live (the event loop's reads, which never write back), and the
    conditional writes refuse it (``ValueError``)."""

    value: bytes
    cas: bytes  # b"": not asked for; else a token: memcached's CAS id and connection (cas_on)
    ttl: int  # seconds left; -1: never expires; NOT_READ: not asked for


# A CAS id no item holds (memcached counts them up from 1 in 64 bits).
NO_CAS_ID = b"18446744073709551615"


def store_pipeline(
    command: bytes, keys: Sequence[bytes], values: Sequence[bytes], expire: int
) -> bytes:
    return b"".join(
        [
            b"%s %s 0 %d %d\r\n%s\r\n" % (command, k, expire, len(v), v)
            for k, v in zip(keys, values, strict=True)
        ]
    )


def cas_pipeline(
    keys: Sequence[bytes], values: Sequence[bytes], cas_ids: Sequence[bytes], expires: Sequence[int]
) -> bytes:
    return b"".join(
        [
            b"cas %s 0 %d %d %s\r\n%s\r\n" % (k, e, len(v), c, v)
            for k, v, c, e in zip(keys, values, cas_ids, expires, strict=True)
        ]
    )


def same_value_pipeline(command: bytes, keys: Sequence[bytes], value: bytes) -> bytes:
    """One value stored under many keys: the whole pipeline is a single join."""
    head = command + b" "
    tail = b" 0 0 %d\r\n%s\r\n" % (len(value), value)
    return head + (tail + head).join(keys) + tail


QUIET_END = b"MN\r\n"


def quiet_append_pipeline(keys: Sequence[bytes], suffix: bytes, value: bytes) -> bytes:
    """``value`` appended to each key (with ``suffix``) by a quiet meta set, ``mn`` last: one
    join, as ``same_value_pipeline``. Only refusals are answered (``NS k<key>``: the item is
    missing or would pass the size limit), then ``MN``. ``value`` is at most
    ``QUIET_VALUE_MAX`` bytes, so no append is refused as too large."""
    if len(value) > QUIET_VALUE_MAX:
        raise ValueError(f"a quiet append carries at most {QUIET_VALUE_MAX} bytes")
    head = b"ms "
    tail = b"%s %d MA q k\r\n%s\r\n" % (suffix, len(value), value)
    return head + (tail + head).join(keys) + tail + b"mn\r\n"


def quiet_end(buf: bytes, pos: int) -> int:
    """The position after the ``MN`` line that ends a quiet pipeline's replies in
    ``buf[pos:]``, or -1 if it has not come yet. An ``MN`` inside a key (``NS kXMN``) is not
    at a line's start. Sans I/O, as ``take_values``."""
    at = buf.find(QUIET_END, pos)
    while at > pos and buf[at - 1] != 0x0A:  # b"\n"
        at = buf.find(QUIET_END, at + 1)
    return at + len(QUIET_END) if at >= 0 else -1


def line_pipeline(command: bytes, keys: Sequence[bytes], rest: Sequence[bytes]) -> bytes:
    """``command key`` and the rest of each line (arguments with their leading space)."""
    return b"".join([b"%s %s%s\r\n" % (command, k, r) for k, r in zip(keys, rest, strict=True)])


# ``Item(...)`` runs a NamedTuple's ``__new__`` written in Python; this makes the same tuple in C
# (~0.2 µs an item: a warm timeline read parses five).
_new_item = tuple.__new__


def take_values(
    buf: bytes,
    pos: int,
    count: int,
    found: list[Item | None],
    writable: bool = True,
    stamp: bytes = b"",
) -> tuple[int, int]:
    """Parses meta get replies (flags ``v c t``, or ``v`` if not ``writable``) from
    ``buf[pos:]`` onto ``found`` until it holds ``count``: returns the position after the last
    whole reply taken and how many bytes from there are needed to take the next (0: done).
    Values are read by their announced length, so they may hold any bytes. Raises
    ``ValueError`` on a reply out of protocol. Sans I/O: the blocking pipe and the event loop's
    connection (memcache/async_cluster.py) both read through it.

    The native core takes the replies in memcached's own form (a tenth of the reference's CPU
    an item, measured); from the first it does not decide, ``take_values_reference`` goes on,
    so every result and every error is the reference's."""
    if core is not None:
        pos, need = core.take_values(buf, pos, count, found, writable, stamp, Item)
        if need >= 0:
            return pos, need
    return take_values_reference(buf, pos, count, found, writable, stamp)


def take_values_reference(
    buf: bytes,
    pos: int,
    count: int,
    found: list[Item | None],
    writable: bool = True,
    stamp: bytes = b"",
) -> tuple[int, int]:
    """``take_values`` in Python."""
    tokens = 4 if writable else 2
    while len(found) < count:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return pos, len(buf) - pos + 1
        if eol == pos + 2 and buf.startswith(b"EN", pos):
            found.append(None)
            pos = eol + 2
            continue
        head = buf[pos:eol].split()
        if (
            len(head) != tokens
            or head[0] != b"VA"
            or not head[1].isdigit()
            or (writable and not (head[2].startswith(b"c") and head[3].startswith(b"t")))
        ):
            raise ValueError(f"unexpected meta get reply {buf[pos:eol][:200]!r}")
        end = eol + 2 + int(head[1])
        if len(buf) < end + 2:
            return pos, end + 2 - pos
        if writable:
            cas = head[2][1:] + stamp
            found.append(_new_item(Item, (buf[eol + 2 : end], cas, int(head[3][1:]))))
        else:
            found.append(_new_item(Item, (buf[eol + 2 : end], b"", NOT_READ)))
        pos = end + 2
    return pos, 0


def meta_get_pipeline(keys: Sequence[bytes], writable: bool = True) -> bytes:
    """``mg key v c t`` per key: one reply per key, in order, with the value, its CAS id and
    its remaining time to live; ``mg key v`` if not ``writable`` (the value alone)."""
    flags = b" v c t\r\n" if writable else b" v\r\n"
    return b"mg " + (flags + b"mg ").join(keys) + flags
