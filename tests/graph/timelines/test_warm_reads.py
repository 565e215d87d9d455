"""``WarmReads.page`` against the blocking ``TimelineReader.page``, on the same real memcached.

A warm read is the blocking read's own plan run with multi-GETs sent from an event loop,
so for any state of the cache it must return exactly the blocking read's page or None, and
None (having written nothing) whenever the read would need a write, a store query or a wait.
Multi-GETs are counted by wrapping ``AsyncMemcache.gets_many`` (instrumentation: every call
goes through to the real servers).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import uvloop

from tests.conftest import Refused
from tests.graph.timelines.warm_pair import Pair, make_pair, shown, writes
from timeline_fanout.cli import wiring
from timeline_fanout.cli.settings import Settings
from timeline_fanout.consumers.positions import Origin, Positioned
from timeline_fanout.graph import ListKind, ListRef
from timeline_fanout.graph.lists.fencing import index_marker, new_generation, timeline_marker
from timeline_fanout.graph.model.fresh import Fresh
from timeline_fanout.graph.timelines.reader import BadCursor, TimelineEntry, TimelinePage
from timeline_fanout.graph.timelines.warm_reads import WarmReads
from timeline_fanout.memcache.cluster import MemcacheCluster
from timeline_fanout.schemas import PostDeleted


def warmed(pair: Pair) -> None:
    """``me`` follows ``a`` and ``b``, who posted; the lists and the timeline are cached (a
    blocking read built them) and the warm read remembers ``me``."""
    pair.follow("me", "a", "b")
    for i in range(6):
        pair.post("ab"[i % 2], f"p{i}", ["me"], ago_ms=1000 * i)
    pair.blocking.page("me")  # cold: built from the store
    assert pair.both("me") is not None
    assert len(pair.warm("me").entries) == 6  # type: ignore[union-attr]
    assert len(pair.multi_gets) == 1  # the remembered batch: the texts are known, same mark


def assert_none_and_nothing_written(pair: Pair, user: str = "me") -> None:
    before = writes(pair.settings)
    assert pair.warm(user) is None
    assert writes(pair.settings) == before


def test_a_remembered_read_is_one_batch_a_first_read_two_a_new_celebrity_one_more(
    pair: Pair, cache: MemcacheCluster
) -> None:
    pair.follow("me", "a", "b")
    for i in range(6):
        pair.post("ab"[i % 2], f"p{i}", ["me"], ago_ms=1000 * i)
    pair.blocking.page("me")  # cold: lists and timeline built from the store
    assert pair.memory.get("me") is None  # read the long way: nothing remembered

    first = pair.warm("me", run=uvloop.run)  # uvloop's transports, as `fanout serve` runs
    assert first is not None and first == pair.blocking.page("me")
    assert [e.post_id for e in first.entries] == [f"p{i}" for i in range(6)]
    # The batch, then the head's shards after it, then the page's post bodies.
    assert len(pair.multi_gets) == 3
    assert pair.multi_gets[1] and all(k != pair.following_key("me") for k in pair.multi_gets[1])

    assert pair.both("me") == first
    assert pair.warm("me") == first
    assert len(pair.multi_gets) == 1  # remembered: shards in the batch, the texts known

    head = cache.gets_many([pair.following_key("me")])[pair.following_key("me")]
    pair.celebrity_post("star", "s1")
    pair.follow("me", "star")
    after = cache.gets_many([pair.following_key("me")])[pair.following_key("me")]
    assert (after.value, after.cas) == (head.value, head.cas)  # no rollover: same shards
    page = pair.warm("me")
    assert page is not None and page.entries[0] == TimelineEntry(pair.now, "star", "s1")
    assert len(pair.multi_gets) == 3  # its recent posts, not remembered, then the bodies
    assert pair.both("me") == page
    assert pair.warm("me") == page
    assert len(pair.multi_gets) == 1  # and its post's text known, under the same mark

    pair.memory.forget("me")  # as a process that never read `me` (or forgot it)
    assert pair.warm("me") == page
    assert len(pair.multi_gets) == 3  # batch, shards, the celebrity's posts; texts known
    assert pair.both("me") == page


def test_an_absent_following_list_is_none_and_written_by_the_blocking_read_only(
    pair: Pair, cache: MemcacheCluster
) -> None:
    warmed(pair)
    pair.blocking.follow_lists.invalidate([ListRef(ListKind.FOLLOWING, "me")])
    assert_none_and_nothing_written(pair)
    assert cache.gets_many([pair.following_key("me")]) == {}  # not claimed, not rebuilt
    healed = pair.blocking.page("me")
    assert len(healed.entries) == 6
    assert pair.both("me") == healed


def test_an_absent_timeline_is_none_and_written_by_the_blocking_read_only(
    pair: Pair, cache: MemcacheCluster
) -> None:
    warmed(pair)
    pair.blocking.timelines.invalidate([ListRef(ListKind.TIMELINE, "me")])
    assert_none_and_nothing_written(pair)
    assert cache.gets_many([pair.timeline_key("me")]) == {}
    healed = pair.blocking.page("me")
    assert len(healed.entries) == 6
    assert pair.both("me") == healed


@pytest.mark.parametrize("which", ["following", "timeline"])
def test_a_list_being_built_is_none_at_once(
    settings: Settings, multi_gets: list[list[bytes]], cache: MemcacheCluster, which: str
) -> None:
    """The blocking read would wait for the builder (``list_build_wait_s`` a round, made long
    here); the warm read must refuse instead of sleeping on the event loop."""
    wait_s = 1.0
    pair = make_pair(settings.model_copy(update={"list_build_wait_s": wait_s}), multi_gets)
    try:
        _none_at_once_while_built(pair, cache, which, wait_s)
    finally:
        pair.close()


def _none_at_once_while_built(
    pair: Pair, cache: MemcacheCluster, which: str, wait_s: float
) -> None:
    warmed(pair)
    gen = new_generation(60, Fresh())
    key, marker = (
        (pair.following_key("me"), index_marker(gen))
        if which == "following"
        else (pair.timeline_key("me"), timeline_marker(gen))
    )
    cache.set_many({key: marker}, expire=60)
    started = time.monotonic()
    assert_none_and_nothing_written(pair)
    assert time.monotonic() - started < wait_s / 2  # never slept a round
    assert cache.get_many([key]) == {key: marker}
    cache.delete_many([key])  # the builder gave up: the next reader builds it
    healed = pair.blocking.page("me")
    assert len(healed.entries) == 6
    assert pair.both("me") == healed


@pytest.mark.parametrize(
    "junk",
    [b"not a token list", b"+junk ", b"+x!a!p9 ", b"+0000000001000!a ", b"+\xff\xfe!a!p "],
)
def test_a_corrupt_timeline_is_none_and_dropped_by_the_blocking_read(
    pair: Pair, cache: MemcacheCluster, junk: bytes
) -> None:
    warmed(pair)
    key = pair.timeline_key("me")
    cache.set_many({key: junk})
    assert_none_and_nothing_written(pair)
    assert cache.get_many([key]) == {key: junk}  # still there
    healed = pair.blocking.page("me")  # drops and regenerates it
    assert len(healed.entries) == 6
    assert cache.get_many([key])[key] != junk
    assert pair.both("me") == healed


def test_missing_celebrity_items_are_none_until_the_blocking_read_rebuilds_them(
    pair: Pair, cache: MemcacheCluster
) -> None:
    warmed(pair)
    pair.celebrity_post("star", "s1")
    pair.follow("me", "star")
    page = pair.both("me")
    assert page is not None and len(page.entries) == 7
    celebrity_posts = pair.blocking.celebrity_posts
    for key in (celebrity_posts.set_key("me"), *celebrity_posts.keys(["star"])):
        cache.delete_many([key])
        assert_none_and_nothing_written(pair)
        assert cache.gets_many([key]) == {}
        assert pair.blocking.page("me") == page  # rebuilds the item from the store
        assert pair.both("me") == page
        assert len(pair.multi_gets) == 1


def test_every_page_with_a_cursor_is_the_blocking_page(pair: Pair) -> None:
    pair.follow("me", "a", "b", "c")
    pair.follow("me", "c", active=False)  # posts of c are filtered out at read time
    for i in range(11):
        pair.post("abc"[i % 3], f"p{i}", ["me"], ago_ms=1000 * (i // 2))  # times shared
    pair.celebrity_post("star", "s1", ago_ms=2500)
    pair.celebrity_post("star", "s2", ago_ms=7000)
    pair.follow("me", "star")
    pair.blocking.page("me")
    want = pair.blocking.read("me", limit=100)
    assert len(want) == 10  # a: 4, b: 4, star: 2
    for limit in (1, 2, 4, 50):
        seen: list[TimelineEntry] = []
        cursor = None
        while True:
            page = pair.both("me", limit, cursor)
            assert page is not None, (limit, cursor)
            seen += page.entries
            cursor = page.next
            if cursor is None:
                break
        assert seen == want, limit


def test_a_forged_cursor_is_bad_cursor_as_in_the_blocking_read(pair: Pair) -> None:
    warmed(pair)
    forged = "bm90LWEtY3Vyc29y"  # "not-a-cursor"
    with pytest.raises(BadCursor):
        pair.blocking.page("me", 10, forged)
    with pytest.raises(BadCursor):
        pair.warm("me", 10, forged)


def test_a_memcached_that_does_not_answer_leaves_the_read_to_the_blocking_one(
    settings: Settings, refused: Refused, pair: Pair
) -> None:
    down = settings.model_copy(update={"memcached": str(refused)})
    warm = wiring.warm_reads(down, wiring.server_trust(down), plans=pair.blocking)

    async def read() -> TimelinePage | None:
        try:
            return await warm.page("me", 10, None)
        finally:
            warm.close()

    assert asyncio.run(read()) is None  # not warm: the blocking read goes around the server


def test_a_kept_page_is_answered_only_from_the_very_replies_it_was_read_from(
    pair: Pair, cache: MemcacheCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page memo (graph/timelines/page_memo.py): an unchanged read is answered without a walk,
    an item rewritten with the same bytes (the celebrity set, rebuilt) is unchanged, and after any
    change the page is walked again and is the blocking page. Walks are counted by wrapping
    ``WarmReads._run`` (instrumentation: the real walk runs)."""
    warmed(pair)
    walks: list[object] = []
    run = WarmReads._run

    async def counted(self: WarmReads, plan: Any) -> Any:
        walks.append(plan)
        return await run(self, plan)

    monkeypatch.setattr(WarmReads, "_run", counted)

    def kept() -> bool:
        """A read through the memo: None or the blocking page rendered (asserted); whether it
        was answered from the memo (a page, and no walk)."""
        before = len(walks)
        body = pair.rendered("me")
        assert body is None or body == shown(pair.blocking.page("me"))
        return body is not None and len(walks) == before

    assert kept()  # kept by ``warmed``'s read
    set_key = pair.blocking.celebrity_posts.set_key("me")
    before = cache.gets_many([set_key])[set_key]
    cache.delete_many([set_key])
    pair.blocking.page("me")  # rebuilds it: the same bytes, a new CAS id
    after = cache.gets_many([set_key])[set_key]
    assert after.value == before.value and after.cas != before.cas
    assert kept()

    changes = [
        lambda: pair.post("a", "p-new", ["me"]),
        lambda: pair.post("b", "p-old", ["me"], ago_ms=10**7),  # below the page: same page
        lambda: pair.follow("me", "c"),
        lambda: pair.delete("b", "p1"),  # a kept page changes when a post on it is deleted
        lambda: pair.follow("me", "a", active=False),
        lambda: pair.blocking.timelines.invalidate([ListRef(ListKind.TIMELINE, "me")]),
    ]
    for change in changes:
        change()
        assert not kept()  # walked, or handed to the blocking read
        pair.blocking.page("me")  # heals what needs healing
        kept()  # walks if the healing changed anything, and keeps the page
        assert kept()


def test_a_deleted_post_leaves_the_warm_page_and_the_page_reads_on_past_it(pair: Pair) -> None:
    warmed(pair)
    before = pair.both("me", 3)
    assert before is not None and [e.post_id for e in before.entries] == ["p0", "p1", "p2"]
    pair.delete("b", "p1")
    pair.delete("a", "p2")
    after = pair.both("me", 3)
    assert after is not None and [e.post_id for e in after.entries] == ["p0", "p3", "p4"]
    assert after.texts == [None, None, None]
    assert pair.warm("me", 3) == after
    assert len(pair.multi_gets) == 3  # the batch, the page's bodies, the bodies read ahead


def test_a_deletion_applied_by_the_fan_out_changes_a_kept_page(pair: Pair) -> None:
    """The memo serves a kept page on its first multi-GET alone, without the bodies of its
    delivered posts: the fan-out's deletion must change those replies (the deletion mark), or
    the deleted post would stay on the kept page."""
    warmed(pair)
    kept = pair.rendered("me")
    assert kept is not None and pair.rendered("me") == kept and b"'p1'" in kept
    applier = wiring.fanout_applier(pair.settings)
    deletion = PostDeleted(type="post_deleted", author="b", post_id="p1")
    applier.apply([Positioned(deletion, pair.pos + 1, Origin("t", 0, 0, None), b"")])
    after = pair.rendered("me")
    assert after is not None and b"'p1'" not in after
    assert after == shown(pair.blocking.page("me"))


def test_no_timeline_bytes_bring_back_a_kept_page_after_a_deletion(
    pair: Pair, cache: MemcacheCluster
) -> None:
    """A compaction, or a regeneration that read the store before the tombstone, can write the
    timeline's very bytes a page was kept with; a chunk task not yet applied leaves them as
    they were. The kept page must not be served again all the same."""
    warmed(pair)
    key = pair.timeline_key("me")
    kept_bytes = cache.gets_many([key])[key].value
    kept = pair.rendered("me")
    assert kept is not None and pair.rendered("me") == kept and b"'p1'" in kept
    pair.delete("b", "p1")
    cache.set_many({key: kept_bytes})  # the timeline holds what it held when the page was kept
    after = pair.rendered("me")
    assert after is None or b"'p1'" not in after
    assert b"'p1'" not in shown(pair.blocking.page("me"))
    assert pair.rendered("me") == shown(pair.blocking.page("me"))


def test_a_late_celebrity_refresh_brings_back_no_kept_cursor_page(
    pair: Pair, cache: MemcacheCluster
) -> None:
    """A zombie's refresh of a celebrity's posts, from a store read before the deletion, puts
    the item back as it was; a page past the first that was kept showing the post must not be
    served again."""
    pair.follow("me", "star", "a")
    for i in range(4):
        pair.post("a", f"a{i}", ["me"], ago_ms=1000 * i)
    pair.celebrity_post("star", "s1", ago_ms=2500)
    first = pair.blocking.page("me", 2)
    assert first.next is not None
    item_key = pair.blocking.celebrity_posts.keys(["star"])[0]
    before = cache.gets_many([item_key])[item_key].value
    for _ in range(3):
        kept = pair.rendered("me", 2, first.next)
    assert kept is not None and b"'s1'" in kept and pair.rendered("me", 2, first.next) == kept
    pair.delete("star", "s1")
    pair.blocking.celebrity_posts.refresh(["star"])
    cache.set_many({item_key: before})  # the late refresh
    after = pair.rendered("me", 2, first.next)
    assert after is None or b"'s1'" not in after
    assert b"'s1'" not in shown(pair.blocking.page("me", 2, first.next))


def test_an_evicted_deletion_mark_keeps_nothing_until_a_blocking_read_puts_a_fresh_one(
    pair: Pair, cache: MemcacheCluster
) -> None:
    """Kept with mark v; a deletion sets w; the mark is then evicted. Absent is not v, and a
    read that finds no mark is not warm, so an absent mark can never match a page kept
    without one."""
    warmed(pair)
    mark = pair.blocking.bodies.mark_key("me")
    kept = pair.rendered("me")
    assert kept is not None and b"'p1'" in kept and mark in cache.gets_many([mark])
    pair.delete("b", "p1")
    cache.delete_many([mark])
    assert pair.rendered("me") is None  # handed to the blocking read
    assert pair.warm("me") is None
    page = pair.blocking.page("me")  # puts a fresh mark
    assert mark in cache.gets_many([mark])
    assert pair.rendered("me") == shown(page) and b"'p1'" not in shown(page)
