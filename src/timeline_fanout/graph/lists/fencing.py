"""The fence: how a list rebuilt from the edge store replaces what is cached, whatever races it.

**The rule.** A list's *head item* (a sharded list's index, a timeline's only item) is its commit
point and its lease at once. A rebuild

1. **claims** the head with ADD of a *building marker* naming a fresh generation (for a sharded
   list the marker names an empty journal shard, ADDed just before; a timeline's marker is its
   first token), with a short expiry (``ListSettings.lease_s``);
2. only then reads the edge store;
3. **commits** with CAS: it reads the head back and replaces it only if it still holds *its own*
   marker (plus, for a timeline, whatever deliveries appended after the marker). Anything else
   (absent, another generation's marker, a committed list) means the claim was broken, and the
   rebuild is dropped.

Writers never wait and never create a list: they read the head *after* writing the store and
append to what it names, marker or committed list alike (a sharded list's marker names the
journal shard, so a write during a build lands in the generation being built). A head that is
absent is skipped: the store holds the write, and any later claim reads the store after it.

**Why it is right.** Take a rebuild R of a list that commits, and a write W whose store write R's
store read missed. W's store write came after R's store read, hence after R's claim; W reads the
head after its store write, so it sees R's marker, R's committed list, or something newer. If
it sees R's generation, its token lands in R's generation (journal or newest shard). If it sees
something newer or nothing, R's marker was gone before R's commit could check it, because a
head, once changed, never returns to an older generation's marker (generations are fresh), and
R's CAS fails. So a committed generation holds every write its snapshot missed. Invalidation is a
DELETE of the head: it breaks any claim in flight (its CAS finds nothing), so a rebuild that read
the store before a change can never commit after the invalidation that followed the change. A
lease that expires, a server that restarts, an evicted marker: all are "the head changed", and
all make the commit fail rather than commit without a write. Nothing here depends on time except
liveness (a crashed rebuilder's marker expires after ``ListSettings.lease_s``).

What the fence does not cover, tokens do (graph/lists/tokens.py): a token appended *late* (a
zombie, a replay, a consumer of another partition) is ordered by its position, not by when it
landed, and
the graph applier confirms every addition against the store after appending it
(consumers/graph_apply.py), so an addition that lost to a newer removal is answered by that
removal's token in whatever generation is current.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from timeline_fanout.graph.lists.tokens import CorruptList
from timeline_fanout.graph.model.fresh import Fresh
from timeline_fanout.memcache import Item, Outcome
from timeline_fanout.memcache.interface import Cache

COMMIT_ATTEMPTS = 8  # CAS rounds against appends racing a timeline's commit
# Remembered index parses: ~45 MB when full (measured with tracemalloc; raw bytes, parsed tuple).
PARSED_INDEXES = 1 << 16
BUILDING = b"~"
JOURNAL = b"j"
# What a fenced fill ADDs to an item without a value yet: a post body, an author's posts item, a
# count (``filling``). Readers take it as a miss.
FILLING = b"~"


# What writers put in a head: a generation of lower-case hex digits, its first 8 the deadline
# (``new_generation`` writes 16: the deadline, then 8 fresh digits), and shard names of hex
# digits (``0..k`` of a build, a rollover's fresh hex) or the journal's ``j``. Anything else is
# a corrupt head, dropped like one: bytes that only look like a head would name keys past
# memcached's 250-byte limit, or a deadline that is no number, and fail every write to the list
# until it expires.
_GEN = re.compile(rb"[0-9a-f]{8,16}")
_SHARD = re.compile(rb"j|[0-9a-f]{1,16}")


class Index(NamedTuple):
    """A sharded list's head: ``"{gen} +{shard} +{shard} "``, newest shard last; while being
    built, ``"{gen}~ +j "``: the generation's journal shard only. Shard names are short hex or
    ``j``; order decides only which shard writers append to (tokens commute)."""

    gen: bytes
    shards: tuple[bytes, ...]
    building: bool

    @staticmethod
    @functools.lru_cache(maxsize=PARSED_INDEXES)
    def parse(raw: bytes) -> Index:
        """Remembered by the raw bytes (a pure function of them): every write reads the head of
        each list it appends to, and a hot list's head changes only on rollover or rebuild."""
        parts = raw.split()
        if not parts or raw.count(b" +") != len(parts) - 1 or len(parts) < 2:
            raise CorruptList(f"bad index {raw[:70]!r}")
        gen = parts[0]
        building = gen.endswith(BUILDING)
        gen = gen.removesuffix(BUILDING)
        shards = tuple(p[1:] for p in parts[1:])
        if (
            _GEN.fullmatch(gen) is None
            or not all(_SHARD.fullmatch(s) for s in shards)
            or len(set(shards)) != len(shards)
        ):
            raise CorruptList(f"bad index {raw[:70]!r}")
        return Index(gen, shards, building)

    def encode(self) -> bytes:
        head = self.gen + (BUILDING if self.building else b"")
        return head + b" " + b"".join(b"+%s " % s for s in self.shards)


def new_generation(lifetime_s: int, fresh: Fresh) -> bytes:
    """A fresh generation id that carries its list's absolute deadline (unix seconds, 8 hex
    digits) then 8 fresh hex digits: whoever rewrites the head later (a rollover, a compaction)
    writes it back with that same absolute expiry, so no rewrite, however delayed, extends a
    list's life."""
    return b"%08x%s" % (int(fresh.clock()) + lifetime_s, fresh.hex(4))


def deadline(gen: bytes) -> int:
    """The absolute expiry (memcached reads an expiry past 30 days as unix time)."""
    return int(gen[:8], 16)


def index_marker(gen: bytes) -> bytes:
    return Index(gen, (JOURNAL,), True).encode()


def timeline_marker(gen: bytes) -> bytes:
    """A timeline being built: its first token names the generation; deliveries append after."""
    return BUILDING + gen + b" "


def timeline_building(value: bytes) -> bool:
    return value.startswith(BUILDING)


def claim(cache: Cache, markers: Mapping[bytes, bytes], lease_s: int) -> set[bytes]:
    """Step 1: ADD each head's marker, to expire after ``lease_s`` unless committed; the heads
    this client now builds."""
    added = cache.add_many(markers, expire=lease_s)
    return {key for key, outcome in added.items() if outcome is Outcome.STORED}


def commit(
    cache: Cache,
    finishing: Mapping[bytes, Callable[[bytes], bytes | None]],
    expire: Mapping[bytes, int],
) -> set[bytes]:
    """Step 3: read each head back and CAS in ``finish(current)``; ``finish`` answers None when
    the head no longer holds this client's marker. Appends racing the CAS (a timeline's
    deliveries) make it go round with the longer value. Returns the heads committed."""
    todo = dict(finishing)
    done: set[bytes] = set()
    for _ in range(COMMIT_ATTEMPTS):
        if not todo:
            break
        current = cache.gets_many(todo)
        swaps: dict[bytes, tuple[bytes, bytes]] = {}
        for key, finish in todo.items():
            item = current.get(key)
            value = None if item is None else finish(item.value)
            if item is not None and value is not None:
                swaps[key] = (value, item.cas)
        outcomes = cache.cas_many(swaps, {k: expire[k] for k in swaps}) if swaps else {}
        done.update(key for key, outcome in outcomes.items() if outcome is Outcome.STORED)
        todo = {k: todo[k] for k, outcome in outcomes.items() if outcome is Outcome.EXISTS}
    return done


def filling(cache: Cache, keys: Sequence[bytes], expire: int) -> dict[bytes, Item]:
    """The fence for single items (a post body, an author's posts item, a count): ``~``
    ADDed where an item is absent, then every item read with ``gets``. The filler then reads
    the store and CASes its answer over the item it read: a write that changed the item after
    the ``gets`` (a mark, a deletion) makes the CAS fail, so an answer read from the store
    before that write is never cached after it. A key ADDed through ``Cache.fills`` while it
    moves between servers is read as absent, and nothing is CAS'd there."""
    if not keys:
        return {}
    cache.add_many(dict.fromkeys(keys, FILLING), expire)
    return cache.gets_many(keys)


def invalidate(cache: Cache, heads: list[bytes]) -> None:
    """Drop lists outright (their store state changed in a way tokens do not express): breaks
    any claim in flight, so no rebuild that read the store earlier can commit."""
    if heads:
        cache.delete_many(heads)


def drop_if_unchanged(cache: Cache, heads: Mapping[bytes, bytes]) -> dict[bytes, Outcome]:
    """Drop lists found broken (a missing shard, corrupt bytes), each only if its head is still
    the one read (CAS id): a reader with an old view must not drop a newer, good generation.
    EXISTS where the head changed since it was read (a writer must not count such a list as
    dropped: the new head may lack its write)."""
    return cache.delete_if_unchanged(heads) if heads else {}
