"""Capped lists (home timelines) in a single item each: the seeds' simple list.

A capped list never outgrows one memcached item (800 entries of at most ~145 bytes), so it
needs no index and no shards: a delivery is one APPEND to ``{ns}:tl:{user}``, pipelined per
server, which is as close to the raw limit as a fan-out can get. The rest is the same machinery
as the sharded lists: created with ADD by a reader's rebuild under a lease, compacted (and
trimmed to the cap) with gets/cas, writes to an absent list skipped.

memcached answers NOT_STORED to an APPEND both when the item is missing and when it would pass
the item size limit; a meta get tells them apart. Too big means compact (trim) now, then append.
"""

from __future__ import annotations

from collections.abc import Sequence

from graph.lists import ListKind, ListRef, TokenLists, _Pending
from graph.tokens import CorruptList, compact_shards, decode, encode_members


class CappedListStore(TokenLists):
    def deliver(self, posts: Sequence[tuple[bytes, Sequence[str]]]) -> None:
        """Append each token to the timelines of its users (a post to its followers): the
        hot path of a fan-out, one pipelined APPEND per timeline with the command stream built
        per post, not per follower. Refused appends (timeline absent, or full) go through the
        same retry rounds as ``append_tokens``."""
        self._skipped = set()
        keys = [self.keys_for(ListKind.TIMELINE, users) for _, users in posts]
        failed = self.cache.append_to_each(
            [(data, k) for (data, _), k in zip(posts, keys, strict=True)]
        )
        self.stats.appends += sum(map(len, keys)) - len(failed)
        refused: dict[bytes, _Pending] = {}
        users_of: dict[int, dict[bytes, str]] = {}
        for index, key in failed:
            data, users = posts[index]
            if key in refused:  # two posts to one absent timeline: one pending write
                refused[key].tokens += data
                continue
            if index not in users_of:
                users_of[index] = dict(zip(keys[index], users, strict=True))
            refused[key] = _Pending(ListRef(ListKind.TIMELINE, users_of[index][key]), key, data)
        self._settle(list(refused.values()))
        self._compact_written(
            ListRef(ListKind.TIMELINE, user) for _, users in posts for user in self._sample(users)
        )

    def _build_many(self, refs: Sequence[ListRef]) -> dict[ListRef, frozenset[str] | None]:
        members = {ref: sorted(self.source.all_members(ref)) for ref in refs}
        values = {self.index_key(ref): encode_members(members[ref]) for ref in refs}
        added = self.cache.add_many(values)
        result: dict[ListRef, frozenset[str] | None] = {}
        for ref in refs:
            committed = added[self.index_key(ref)]
            result[ref] = frozenset(members[ref]) if committed else None
            self.stats.rebuilds += committed
        return result

    def _read_round(
        self, refs: list[ListRef], result: dict[ListRef, frozenset[str]]
    ) -> list[ListRef]:
        keys = dict(zip(refs, self.index_keys(refs), strict=True))
        found = self.cache.gets_many(keys.values())
        missing = [ref for ref in refs if keys[ref] not in found]
        again = []
        for ref, built in self.rebuild_many(missing).items():
            if built is None:
                again.append(ref)
            else:
                result[ref] = built
        broken = []
        for ref in refs:
            if (item := found.get(keys[ref])) is None:
                continue
            try:
                decoded = decode([item[0]])
            except CorruptList:
                broken.append(ref)
                continue
            result[ref] = decoded.members
            if self._is_dirty(decoded):
                self._compact(keys[ref], item)
        self.invalidate(broken)
        return again + broken

    def _compact(self, key: bytes, item: tuple[bytes, bytes]) -> bool:
        value, cas_id = item
        (compacted,) = compact_shards([value], self.settings.max_members)
        if self.cache.cas(key, compacted, cas_id):
            self.stats.compactions += 1
            return True
        self.stats.compactions_lost += 1  # a write won the race: it survives, we give up
        return False

    def _write_round(self, pending: list[_Pending]) -> list[_Pending]:
        by_key = {p.key: p for p in pending}
        stored = self.cache.append_many({k: p.tokens for k, p in by_key.items()})
        failed = [k for k, ok in stored.items() if not ok]
        self.stats.appends += len(stored) - len(failed)
        again: list[_Pending] = []
        absent: list[_Pending] = []
        for key, exists in self.cache.exists_many(failed).items():
            if not exists:
                absent.append(by_key[key])
                continue
            item = self.cache.gets_many([key]).get(key)  # too big: trim it, then append again
            if item is not None:
                self._compact(key, item)
            again.append(by_key[key])
        return again + self._skip_absent(absent)
