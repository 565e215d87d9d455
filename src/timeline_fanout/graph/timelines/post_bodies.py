"""Post texts and deletions, as every page sees them: one memcached item per post.

Timelines hold post names, not posts (graph/timelines/entries.py); a page is read *through* the
posts that still exist, as Mastodon and Bluesky read theirs. ``{ns}|pb|{author}|{post_id}``
holds ``t`` + the text (UTF-8) for a live post, ``n`` for a live post without text, ``x`` for a
deleted one, and ``~`` while a reader fills it from the store. A page multi-GETs the items of
the entries it would show; an entry whose item says deleted is skipped and the walk goes on
(graph/timelines/reader.py), whichever timeline, celebrity item or late delivery brought it.

**Why a deleted post is never shown again.** The store's tombstone is permanent
(``PostStore.delete_posts``) and is written before the consumer SETs the item to ``x``
(consumers/fanout_apply.py). An item holds a live text only if a reader put it there, and a
reader puts it only by CAS over the ``~`` it saw with ``gets`` *before* its store read. Take a
deletion whose SET lands at time s, and a reader whose CAS of a live text succeeds after s: its
CAS holds the CAS id of a ``gets`` that found ``~``; if that ``gets`` came after s it found
``x`` (or, were ``x`` evicted since, an ADD of ``~`` after s, whose store read comes after the
tombstone: deleted), so it came before s, and then s's SET changed the item between the
``gets`` and the CAS, which fails. A restart or an eviction empties the item: a CAS then fails
(NOT_FOUND) and the next fill reads the store, which says deleted. So from the tombstone's SET
on, no item says live; and a page shows an entry only with its item (or, filling, the store's
answer read after the item's ``~``). Deliveries of a deleted post (a replay, a chunk task held
up) and stale celebrity items can still bring its name into a page's candidates: the body
hides it all the same. Nothing depends on the order of deliveries, fills and deletions.

**The deletion mark, for pages kept rendered.** The page memo (graph/timelines/page_memo.py)
serves a rendered page again when its first multi-GET's replies are the same bytes, without
reading bodies. So every first multi-GET asks the reader's copy of the mark too
(``{ns}|deletions|{n}``, one of 16 by a hash of the reader: no key is on every read), and
every deletion SETs every copy to a fresh random value (graph/model/fresh.py) after its
bodies' ``x`` (``delete``); the argument below holds copy by copy. A page rendered from a body
read before the ``x`` had its first multi-GET before that, hence before the mark's SET: its
replies hold an older mark, and no later read finds that value again (values are never
reused; an evicted mark is absent, then ADDed fresh by the next blocking read, ``keep_mark``,
and a warm read that finds none keeps nothing). Whatever brings the post's name back into a
timeline's bytes (a compaction or a regeneration rewriting the very bytes kept, a chunk task
still queued, a late celebrity refresh) cannot make such a page served again. Each deletion
costs every kept page one walk.

**Texts known under a mark.** Texts never change (a post published again keeps the first text,
``store_posts``), so an item once live stays right until the deletion rewrites it, and the
deletion then changes the mark. So a body read live by the multi-GET ``read`` sends, after a
first multi-GET that found the mark at M, is remembered in the process with M (with each mark it
was read after: graph/timelines/known_texts.py), and a later read whose first multi-GET finds
the mark at M takes the text from there without reading the item. Why that is never a post
deleted before the later read began: take a deletion D of the post. Its ``x`` came after the
remembered body read (which found the post live; after the ``x`` an item never says live,
above), so D's mark SET came after that read's mark read, which found M; from then on the mark
holds D's value, a later one, or none, never M again. A read that found M had its first
multi-GET before D's mark SET, so before D was applied: the page memo's argument
(graph/timelines/page_memo.py), post by post. Only bodies read after the mark are remembered: a
body in ``found`` itself came from the same multi-GET as the mark, in no known order. A text is
read again ``heal_s`` after it was remembered, as an item expires: whatever wrote a wrong text
into an item is gone from every process as from memcached (docs/guarantees.md, bounded
self-healing).

Items expire after ``heal_s``, as every cached item does (docs/guarantees.md, bounded
self-healing); an expired or evicted item is filled again from the store, one query per page,
not one per post.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress
from typing import NamedTuple

from timeline_fanout.graph.lists.fencing import filling
from timeline_fanout.graph.model.edges import PostRecord, PostRef, PostStore
from timeline_fanout.graph.model.fresh import SYSTEM, Fresh
from timeline_fanout.graph.model.keys import KeySpace
from timeline_fanout.graph.timelines.known_texts import KnownTexts
from timeline_fanout.graph.timelines.plan import Plan, blocking, multi_get, run_blocking
from timeline_fanout.memcache import Item, Outcome
from timeline_fanout.memcache.interface import Cache

LIVE = b"t"
NO_TEXT = b"n"
DELETED = b"x"
CODE = "pb"


class BodyWriteError(RuntimeError):
    """A deletion's item was not written: the batch is retried, never committed."""


@dataclass(slots=True)
class Bodies:
    """What is known of some posts, each named ``{author}!{post_id}`` as in a timeline member
    (graph/timelines/entries.py): the live ones' texts and the deleted ones."""

    texts: dict[str, str | None] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)


class State(enum.Enum):
    LIVE = "live"
    DELETED = "deleted"
    UNKNOWN = "unknown"  # being filled, or not ours: filled from the store


class Parsed(NamedTuple):
    state: State
    text: str | None = None


_DELETED = Parsed(State.DELETED)
_UNKNOWN = Parsed(State.UNKNOWN)


# Parsed items remembered by their bytes (a post is on many pages, and texts never change):
# items of at most PARSED_VALUE_MAX bytes, PARSED_MAX of them (emptied when full), ~8 MiB.
PARSED_MAX = 8192
PARSED_VALUE_MAX = 1024
_parsed: dict[bytes, Parsed] = {}


def _parse(value: bytes) -> Parsed:
    parsed = _parsed.get(value)
    if parsed is None:
        parsed = _parse_new(value)
        if len(value) <= PARSED_VALUE_MAX:
            if len(_parsed) >= PARSED_MAX:
                _parsed.clear()
            _parsed[value] = parsed
    return parsed


def _parse_new(value: bytes) -> Parsed:
    if value[:1] == LIVE:
        try:
            return Parsed(State.LIVE, value[1:].decode("utf-8"))
        except UnicodeDecodeError:
            return _UNKNOWN
    if value == NO_TEXT:
        return Parsed(State.LIVE)
    return _DELETED if value == DELETED else _UNKNOWN


def _encode(text: str | None) -> bytes:
    return NO_TEXT if text is None else LIVE + text.encode("utf-8")


def post_name(member: str) -> str:
    """``{author}!{post_id}`` of a timeline member ``{ts}!{author}!{post_id}``."""
    return member.partition("!")[2]


class PostBodies:
    def __init__(
        self,
        cache: Cache,
        store: PostStore,
        keys: KeySpace,
        heal_s: int,
        known: KnownTexts | None = None,
        fresh: Fresh = SYSTEM,
    ) -> None:
        """``known``: the texts known under a deletion mark, shared by the process's bodies
        (graph/timelines/known_texts.py); one of its own if None. ``fresh``: where the mark's
        values and the known texts' clock come from (graph/model/fresh.py)."""
        self._cache = cache
        self._fills = cache.fills()  # best-effort: a key moving is answered refused
        self._store = store
        self._keys = keys
        self._mark_keys = keys.copies("deletions")
        self._prefix = f"{keys.namespace}|{CODE}|"
        self._key_prefix = self._prefix.encode("ascii")
        self._expire = heal_s  # as every cached item: an item gone wrong heals (module docstring)
        self._known = known or KnownTexts()
        self._fresh = fresh

    def mark_key(self, reader: str) -> bytes:
        """The copy of the deletion mark ``reader``'s first multi-GET asks."""
        return self._keys.deletions_key(reader)

    def _mark(self, found: Mapping[bytes, Item]) -> Item | None:
        """The deletion mark's copy among a first multi-GET's items (it asks one)."""
        for key in self._mark_keys:
            item = found.get(key)
            if item is not None:
                return item
        return None

    def holds(self, key: bytes) -> bool:
        """Whether ``key`` is a post body's."""
        return key.startswith(self._key_prefix)

    def keys(self, posts: Iterable[str]) -> list[bytes]:
        """Items of posts named ``{author}!{post_id}`` (ids already valid: they come from
        timeline members or events)."""
        prefix = self._prefix
        joined = (" " + prefix).join(posts)  # one join, one encode, one split: C speed
        if not joined:
            return []
        return (prefix + joined.replace("!", "|")).encode("ascii").split(b" ")

    def read(self, posts: Sequence[str], found: Mapping[bytes, Item]) -> Bodies:
        """``reading``'s bodies, read with this process's connections."""
        return run_blocking(self.reading(posts, found), self._cache)

    def reading(self, posts: Sequence[str], found: Mapping[bytes, Item]) -> Plan[Bodies]:
        """The bodies of ``posts`` (graph/timelines/plan.py): from ``found`` (a read's
        multi-GET) where it has them, else the texts known under the deletion mark ``found``
        holds, else one more multi-GET, and what is still missing filled from the store through
        the ``~`` fence (module docstring), a blocking step."""
        bodies = Bodies()
        unread: dict[bytes, str] = {}
        mark = self._mark(found)
        now = self._fresh.monotonic()
        for post, key in zip(posts, self.keys(posts), strict=True):
            item = found.get(key)
            if item is None or not self._take(bodies, post, item.value):
                unread[key] = post
        if unread and mark is not None:
            for key, text in self._known.texts(unread, mark.value, now).items():
                bodies.texts[unread.pop(key)] = text
        if not unread:
            return bodies
        got = yield from multi_get(list(unread))
        if mark is not None:
            self._known.remember(_live_texts(got), mark.value, now + self._expire)
        missing = {}
        for key, post in unread.items():
            item = got.get(key)
            if item is None or not self._take(bodies, post, item.value):
                missing[key] = post
        if missing:
            yield from blocking("post bodies to fill", lambda: self._filled(bodies, missing, got))
        return bodies

    def _filled(
        self, bodies: Bodies, missing: Mapping[bytes, str], got: Mapping[bytes, Item]
    ) -> None:
        """``missing`` (not found, or not readable, in ``got``) filled: ``~`` ADDed where an
        item is absent and its server usable, read again with ``gets``, and the store's answer
        CAS'd over what those found (items on an unavailable server are answered from the
        store and not filled, as are items that begin moving between servers meanwhile)."""
        seen = {key: got[key] for key in missing if key in got}
        empty = [key for key in missing if key not in got]
        fillable = list(compress(empty, self._cache.available(empty))) if empty else []
        if fillable:
            seen.update(filling(self._fills, fillable, self._expire))
        fill = {}
        for key, post in missing.items():
            item = seen.get(key)
            if item is None or not self._take(bodies, post, item.value):
                fill[key] = (post, item)
        if fill:
            self._fill(bodies, fill)

    @staticmethod
    def _take(bodies: Bodies, post: str, value: bytes) -> bool:
        parsed = _parse(value)
        if parsed.state is State.LIVE:
            bodies.texts[post] = parsed.text
        elif parsed.state is State.DELETED:
            bodies.gone.add(post)
        return parsed.state is not State.UNKNOWN

    def _fill(self, bodies: Bodies, fill: Mapping[bytes, tuple[str, Item | None]]) -> None:
        """The store's answer for these posts, CAS'd over the item each ``gets`` found (read
        before the store: the fence). A post the store does not know (never stored) is shown
        without text and not cached."""
        refs = {key: PostRef(*post.split("!", 1)) for key, (post, _) in fill.items()}
        stored = self._store.post_bodies(list(refs.values()))
        writes: dict[bytes, tuple[bytes, bytes]] = {}
        for key, (post, item) in fill.items():
            ref = refs[key]
            if ref in stored.deleted:
                bodies.gone.add(post)
                value = DELETED
            else:
                bodies.texts[post] = stored.texts.get(ref)
                if ref not in stored.texts:
                    continue
                value = _encode(stored.texts[ref])
            if item is not None:
                writes[key] = (value, item.cas)
        if writes:  # failed: someone wrote since, and theirs stands; or the item moves
            self._fills.cas_many(writes, self._expire)

    def store(self, posts: Sequence[PostRecord]) -> dict[PostRef, PostRecord]:
        """``PostStore.store_posts`` inside the fence, so that the posts' items are live before
        the first page shows them (no reader has to fill them): ``~`` ADDed where an item is
        missing, every item read with ``gets``, the store written and its answer (the texts
        stored first; nothing for a deleted post) CAS'd over the items that were not filled
        yet. The store's answer is read after the ``gets``: the argument of the module
        docstring holds as for a reader's fill. A failed CAS is someone else's newer write."""
        keys = self.keys(f"{p.author}!{p.post_id}" for p in posts)
        seen = filling(self._cache, keys, self._expire)
        stored = self._store.store_posts(posts)
        writes: dict[bytes, tuple[bytes, bytes]] = {}
        for post, key in zip(posts, keys, strict=True):
            item = seen.get(key)
            if item is None or _parse(item.value).state is not State.UNKNOWN:
                continue
            record = stored.get(PostRef(post.author, post.post_id))
            writes[key] = (DELETED if record is None else _encode(record.text), item.cas)
        if writes:
            self._cache.cas_many(writes, self._expire)
        return stored

    def delete(self, posts: Sequence[PostRef]) -> None:
        """After the store's tombstones: every item says deleted. Raises ``BodyWriteError``
        unless every SET was stored (the deletion is retried whole)."""
        if not posts:
            return
        keys = self.keys(f"{p.author}!{p.post_id}" for p in posts)
        outcomes = self._cache.set_many(dict.fromkeys(keys, DELETED), self._expire)
        marks = {key: self._fresh_mark() for key in self._mark_keys}
        outcomes.update(self._cache.set_many(marks, self._expire))
        failed = [k for k in [*keys, *marks] if outcomes.get(k) is not Outcome.STORED]
        if failed:
            raise BodyWriteError(f"{len(failed)} deletion items not written: {failed[0]!r}")

    def keeping_mark(self, reader: str, found: Mapping[bytes, Item]) -> Plan[None]:
        """``keep_mark`` as a plan's step: nothing to do when ``found`` holds the copy."""
        if self.mark_key(reader) not in found:
            yield from blocking("the deletion mark", lambda: self.keep_mark(reader, found))

    def keep_mark(self, reader: str, found: Mapping[bytes, Item]) -> None:
        """A read whose first multi-GET (``found``) did not find ``reader``'s copy of the
        deletion mark puts a fresh one (evicted, expired, a restarted server, or no deletion
        yet): a page is kept by the page memo only with the mark in its replies (module
        docstring)."""
        key = self.mark_key(reader)
        if key not in found and self._cache.available([key])[0]:
            self._fills.add_many({key: self._fresh_mark()}, self._expire)

    def _fresh_mark(self) -> bytes:
        """Never a value the mark held before: 96 random bits."""
        return self._fresh.hex(12)


def _live_texts(got: Mapping[bytes, Item]) -> dict[bytes, str | None]:
    """The texts of the items of ``got`` that say live, by body key."""
    texts: dict[bytes, str | None] = {}
    for key, item in got.items():
        parsed = _parse(item.value)
        if parsed.state is State.LIVE:
            texts[key] = parsed.text
    return texts
