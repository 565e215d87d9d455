"""Capped lists (home timelines) in a single item each: the Membase manual's simple list.

A capped list never outgrows one memcached item (800 entries of at most ~145 bytes), so it
needs no index and no shards: a delivery is one APPEND to ``{ns}|tl|{user}``, pipelined per
server, which is as close to the raw limit as a fan-out can get. The item is its own head for
the fence (graph/lists/fencing.py): a rebuild ADDs it holding only a marker token, deliveries append
after the marker as to any timeline, and the commit CASes in the regenerated entries followed
by whatever was appended meanwhile.

memcached answers NOT_STORED to an APPEND both when the item is missing and (near the limit)
when it would pass the item size limit; a meta get tells them apart. Too big means trim now
(compaction keeps the newest ``max_members``), then append.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from timeline_fanout.graph.lists import fencing
from timeline_fanout.graph.lists.token_lists import (
    Delivery,
    ListContext,
    Pending,
    ReadRound,
    TokenLists,
    WriteRound,
)
from timeline_fanout.graph.lists.tokens import (
    CorruptList,
    additions,
    compact_shards,
    decode,
    encode_members,
)
from timeline_fanout.graph.model.edges import Snapshot
from timeline_fanout.graph.model.keys import ListKind, ListRef
from timeline_fanout.memcache.cluster import Item, Outcome, keep_ttl
from timeline_fanout.memcache.wire import AppendGroup


def shorter(ttl: int) -> int:
    """The expiry to write a timeline back with: a second less than it had when read, so a
    compaction (its CAS comes within that second) never extends a timeline's life."""
    return keep_ttl(ttl - 1) if ttl > 1 else keep_ttl(ttl)


class CappedLayout:
    """Timelines, each one item (``ListLayout`` and ``EachAppending``)."""

    kind = ListKind.TIMELINE

    def __init__(self, context: ListContext) -> None:
        self.context = context
        self.cache = context.cache
        self.settings = context.settings
        self.stats = context.stats

    def append_each(self, posts: Sequence[Delivery]) -> WriteRound:
        """One pipelined APPEND per timeline, the command stream built per post, not per
        follower; the refused appends (timeline absent, or full) are left to go round."""
        keys = [self.context.keys.list_keys(self.kind, users) for _, users in posts]
        refused = self.cache.append_to_each(
            [AppendGroup(post.token, k) for post, k in zip(posts, keys, strict=True)]
        )
        self.stats.appends += sum(map(len, keys)) - len(refused)
        pending: dict[bytes, Pending] = {}
        users_of: dict[int, dict[bytes, str]] = {}
        for group, key, _ in refused:
            data, users = posts[group]
            if key in pending:  # two posts to one refused timeline: one pending write
                pending[key] = pending[key]._replace(tokens=pending[key].tokens + data)
                continue
            if group not in users_of:
                users_of[group] = dict(zip(keys[group], users, strict=True))
            pending[key] = Pending(ListRef(self.kind, users_of[group][key]), key, data)
        return WriteRound(again=list(pending.values()))

    # -- rebuilds ----------------------------------------------------------------------------

    def claim(self, gens: Mapping[bytes, bytes]) -> set[bytes]:
        markers = {k: fencing.timeline_marker(g) for k, g in gens.items()}
        return fencing.claim(self.cache, markers, self.settings.lease_s)

    def commit(self, builds: Mapping[bytes, tuple[bytes, Snapshot]]) -> set[bytes]:
        def finishing(gen: bytes, snapshot: Snapshot) -> Callable[[bytes], bytes | None]:
            marker = fencing.timeline_marker(gen)
            rebuilt = encode_members(snapshot.members)

            def finish(current: bytes) -> bytes | None:
                if not current.startswith(marker):
                    return None
                (value,) = compact_shards(
                    [rebuilt + current[len(marker) :]], self.settings.max_members
                )
                return value

            return finish

        finishing_all = {key: finishing(gen, snap) for key, (gen, snap) in builds.items()}
        deadlines = {key: fencing.deadline(gen) for key, (gen, _) in builds.items()}
        return fencing.commit(self.cache, finishing_all, deadlines)

    # -- reads -------------------------------------------------------------------------------

    def read_round(self, refs: list[ListRef]) -> ReadRound:
        keys = dict(zip(refs, self.context.keys.ref_keys(refs), strict=True))
        found = self.cache.gets_many(keys.values())
        read = ReadRound()
        broken: dict[bytes, bytes] = {}
        for ref in refs:
            item = found.get(keys[ref])
            if item is None:
                read.absent.append(ref)
                continue
            if fencing.timeline_building(item.value):
                read.building.append(ref)
                continue
            try:
                decoded = decode([item.value])
            except CorruptList:
                broken[keys[ref]] = item.cas
                continue
            read.found[ref] = decoded.members
            if self.context.is_dirty(decoded):
                self._compact(keys[ref], item)
        fencing.drop_if_unchanged(self.cache, broken)
        self.stats.invalidations += len(broken)
        read.again = [ref for ref in refs if keys[ref] in broken]
        return read

    def fetched(self, item: Item | None) -> list[str] | None:
        """A timeline's members from an item someone else's multi-GET brought, in item order
        with duplicates kept (see ``additions``), when it is a committed, clean timeline; None
        for anything else (absent, being built, corrupt, dirty), which ``read_many`` handles
        as always (regenerate, wait, drop, compact)."""
        if item is None or fencing.timeline_building(item.value):
            return None
        members = additions(item.value)
        if members is None or self.context.dirty(len(set(members)), len(members)):
            return None
        return members

    def _compact(self, key: bytes, item: Item) -> None:
        """Best effort: a write that won the race survives and the compaction is given up
        (counted in ``stats``); the next dirty read tries again."""
        (compacted,) = compact_shards([item.value], self.settings.max_members)
        outcome = self.cache.cas(key, compacted, item.cas, shorter(item.ttl))
        if outcome is Outcome.STORED:
            self.stats.compactions += 1
        else:
            self.stats.compactions_lost += 1

    # -- writes ------------------------------------------------------------------------------

    def write_round(self, pending: list[Pending]) -> WriteRound:
        by_key = {p.key: p for p in pending}
        left = WriteRound()
        outcomes = self.cache.append_many({k: p.tokens for k, p in by_key.items()})
        refused = [k for k, outcome in outcomes.items() if not outcome.ok]
        self.stats.appends += len(outcomes) - len(refused)
        present = self.cache.exists_many(refused)
        full = [k for k in refused if present[k]]
        left.skipped += [by_key[key] for key in refused if not present[key]]
        items = self.cache.gets_many(full)
        dropped: list[bytes] = []
        for key in full:  # too big: trim it, then append again
            item = items.get(key)
            if item is None:
                continue  # gone meanwhile: the next round skips it
            if fencing.timeline_building(item.value) or not self._trim(key, item):
                dropped.append(key)  # a build this full, or one that trimming cannot shrink
        fencing.invalidate(self.cache, dropped)  # (cap too big for an item): regenerate it
        left.skipped += [by_key[key] for key in dropped]
        left.again += [by_key[k] for k in full if k not in dropped]
        return left

    def _trim(self, key: bytes, item: Item) -> bool:
        """Compact a timeline that an append found full; False if that frees nothing (or the
        item is corrupt: the caller drops it, and its next reader regenerates it)."""
        try:
            (compacted,) = compact_shards([item.value], self.settings.max_members)
        except CorruptList:
            return False
        if len(compacted) >= len(item.value):
            return False
        outcome = self.cache.cas(key, compacted, item.cas, shorter(item.ttl))
        self.stats.compactions += outcome is Outcome.STORED
        return outcome in (Outcome.STORED, Outcome.EXISTS)  # EXISTS: changed, go round


CappedLists = TokenLists[CappedLayout]
