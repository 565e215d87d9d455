"""The timeline read path on the real memcached servers: one multi-GET when warm, no store query,
the same view as the definition (a model here), and cached celebrity posts within their bound."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, cast

import pytest

from tests.graph.lists.contention import write
from timeline_fanout.graph import (
    EdgeChange,
    ListKind,
    ListRef,
    ListSettings,
    ShardedLists,
)
from timeline_fanout.graph.anti_entropy import AntiEntropy
from timeline_fanout.graph.lists.capped import CappedLayout, CappedLists
from timeline_fanout.graph.lists.sharded import ShardedLayout
from timeline_fanout.graph.lists.token_lists import Delivery, TokenLists
from timeline_fanout.graph.lists.tokens import token
from timeline_fanout.graph.model.edges import EdgeStore, PostRecord, PostRef
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore
from timeline_fanout.graph.timelines.celebrity_posts import CelebrityPosts
from timeline_fanout.graph.timelines.fetch import ReadMemory, Remembered
from timeline_fanout.graph.timelines.known_texts import KnownTexts
from timeline_fanout.graph.timelines.reader import (
    BadCursor,
    TimelineEntry,
    TimelineReader,
    TimelineSource,
)
from timeline_fanout.memcache.cluster import MemcacheCluster, Outcome


class Counting:
    """A real object behind a thin wrapper that counts calls by method name (no mocks: every
    call goes through to the real cache or store)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if not callable(value) or name.startswith("_"):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return value(*args, **kwargs)

        return call


@dataclass
class Setup:
    cache: Counting
    store: Counting
    lists: ShardedLists
    timelines: CappedLists
    celebrities: CelebrityPosts
    reader: TimelineReader
    pos: int = 0

    def follow(self, follower: str, followee: str, active: bool = True) -> None:
        self.pos += 1
        write(
            cast(SqliteEdgeStore, self.store),
            self.lists,
            [EdgeChange(follower, followee, active, self.pos)],
        )

    def post(self, author: str, post_id: str, ts: int, followers: list[str]) -> TimelineEntry:
        """What the fan-out does for an ordinary author: the store, then the timelines."""
        self.reader.bodies.store([PostRecord(author, post_id, ts)])
        entry = TimelineEntry(ts, author, post_id)
        self.timelines.deliver([Delivery(token(True, entry.member), followers)])
        return entry

    def celebrity_post(self, author: str, post_id: str, ts: int, refresh: bool = True) -> None:
        """What the fan-out does for a celebrity: the store, the mark, then the cached items."""
        self.reader.bodies.store([PostRecord(author, post_id, ts)])
        self.store.add_celebrities([author])
        if refresh:
            self.celebrities.refresh([author])


def make(
    cache: MemcacheCluster, store: SqliteEdgeStore, unique: str, cap: int = 50, ttl_s: int = 5
) -> Setup:
    counted_cache = Counting(cache)
    counted_store = Counting(store)
    as_cache = cast(MemcacheCluster, counted_cache)
    as_store = cast(EdgeStore, counted_store)
    lists = TokenLists(
        ShardedLayout,
        as_cache,
        as_store,
        ListSettings(shard_bytes=128, namespace=unique, compact_write_prob=0),
    )
    timelines = TokenLists(
        CappedLayout,
        as_cache,
        TimelineSource(as_store, cap),
        ListSettings(namespace=unique, max_members=cap, compact_write_prob=0),
    )
    celebrities = CelebrityPosts(as_cache, as_store, timelines.keys, cap, ttl_s)
    reader = TimelineReader(as_store, lists, timelines, cap, celebrities)
    return Setup(counted_cache, counted_store, lists, timelines, celebrities, reader)


@pytest.fixture
def setup(cache: MemcacheCluster, sqlite_store: SqliteEdgeStore, unique: str) -> Setup:
    return make(cache, sqlite_store, unique)


def reset(s: Setup) -> None:
    s.cache.calls.clear()
    s.store.calls.clear()


def test_a_warm_read_is_its_batch_then_the_texts_it_does_not_know_and_no_store_query(
    setup: Setup,
) -> None:
    s = setup
    for followee in ("a", "b", "star"):
        s.follow("me", followee)
    s.reader.read("me")  # cold: lists and timeline built from the store, items cached
    s.reader.read("me")  # remembers the following list's head, finds the deletion mark
    posts = [s.post("a", "p1", 1000, ["me"]), s.post("b", "p2", 1001, ["me"])]
    s.celebrity_post("star", "s1", 1002)
    reset(s)
    shown = s.reader.read("me")
    assert shown == [TimelineEntry(1002, "star", "s1"), *reversed(posts)]
    # The batch, the posts of the celebrity ``star`` has become since, then the bodies of the
    # three posts, new to the process.
    assert s.cache.calls == {"gets_many": 3}
    assert s.store.calls == {}
    reset(s)
    assert s.reader.read("me") == shown
    assert s.cache.calls == {"gets_many": 1}  # the texts are known while the mark stands
    page = s.reader.page("me", 2)
    assert page.entries == shown[:2] and page.next is not None
    assert s.reader.page("me", 2, page.next).entries == shown[2:]
    assert s.cache.calls == {"gets_many": 3} and s.store.calls == {}


def test_a_changed_following_list_is_read_after_its_new_head(setup: Setup) -> None:
    s = setup
    s.follow("me", "a")
    s.reader.read("me")
    s.reader.read("me")
    # Enough follows to roll the 128-byte shards over: the head names new shards.
    followees = [f"f{i:03d}" for i in range(40)]
    for followee in followees:
        s.follow("me", followee)
    entry = s.post(followees[-1], "new", 2000, ["me"])
    reset(s)
    assert s.reader.read("me") == [entry]
    # The batch, the new head's shards, then the new post's body (not the last page's).
    assert s.cache.calls == {"gets_many": 3}
    reset(s)
    assert s.reader.read("me") == [entry]
    assert s.cache.calls == {"gets_many": 1}  # the batch; the text is known

    s.lists.invalidate([ListRef(ListKind.FOLLOWING, "me")])  # a rebuild: a new generation
    assert s.reader.read("me") == [entry]
    s.follow("me", followees[-1], active=False)
    assert s.reader.read("me") == []  # filtered at read time


def test_the_users_remembered_are_bounded(
    cache: MemcacheCluster, sqlite_store: SqliteEdgeStore, unique: str
) -> None:
    s = make(cache, sqlite_store, unique)
    s.reader.fetcher = type(s.reader.fetcher)(s.lists, s.timelines, s.celebrities, ReadMemory(2))
    for user in ("u1", "u2", "u3"):
        s.follow(user, "a")
        s.reader.read(user)
        s.reader.read(user)
    reset(s)
    s.reader.read("u3")
    assert s.cache.calls == {"gets_many": 1}
    reset(s)
    s.reader.read("u1")  # forgotten: its shards are read after its head
    assert s.cache.calls == {"gets_many": 2}


def test_a_user_only_looked_up_stays_remembered_while_others_are_read() -> None:
    """The page memo answers a warm user's reads without remembering anything anew, so a
    lookup counts as a use (otherwise such users drift out under many other users)."""
    memory = ReadMemory(2)
    last = {u: Remembered(b"head " + u.encode(), (), (u.encode(),)) for u in ("u1", "u2", "u3")}
    memory.put("u1", last["u1"])
    memory.put("u2", last["u2"])
    assert memory.get("u1") == last["u1"]  # u1 read since u2 was remembered
    memory.put("u3", last["u3"])
    assert (memory.get("u1"), memory.get("u2"), memory.get("u3")) == (last["u1"], None, last["u3"])


def test_readers_sharing_a_memory_use_each_others_last_read(
    cache: MemcacheCluster, sqlite_store: SqliteEdgeStore, unique: str
) -> None:
    """As ``fanout serve``'s threads do: a user's next read is one multi-GET whichever thread
    serves it, and sees what a read after the head would see."""
    s = make(cache, sqlite_store, unique)
    memory, known = ReadMemory(), KnownTexts()
    store = cast(EdgeStore, s.store)
    first, second = (
        TimelineReader(store, s.lists, s.timelines, 50, s.celebrities, memory, known)
        for _ in range(2)
    )
    s.follow("me", "a")
    entry = s.post("a", "p1", 1000, ["me"])
    first.read("me")  # cold: the list is built, nothing remembered
    first.read("me")  # remembers the following list's head
    reset(s)
    found: list[list[TimelineEntry]] = []
    thread = threading.Thread(target=lambda: found.append(second.read("me")))
    thread.start()
    thread.join()
    assert found == [[entry]]
    assert s.cache.calls == {"gets_many": 1}  # the remembered batch; the text is known


def test_readers_asking_different_copies_of_the_deletion_mark_keep_each_others_texts(
    setup: Setup,
) -> None:
    """Two readers whose first multi-GETs ask copies of the mark holding different values (each
    ADDed fresh): once each has read the texts under its own copy, neither reads them again,
    however their reads alternate."""
    s = setup
    keys = s.timelines.keys
    me = "me"
    you = next(
        u
        for u in (f"you{i}" for i in range(64))
        if keys.copy_for("deletions", u) != keys.copy_for("deletions", me)
    )
    for reader in (me, you):
        s.follow(reader, "a")
    posts = [s.post("a", f"p{i}", 1000 + i, [me, you]) for i in range(5)]
    for _ in range(2):  # cold, then remembered with the mark copy each ADDed
        for reader in (me, you):
            assert s.reader.read(reader) == posts[::-1]
    marks = s.cache.get_many([keys.copy_for("deletions", u) for u in (me, you)])
    assert len(set(marks.values())) == 2
    reset(s)
    for _ in range(3):
        for reader in (me, you):
            assert s.reader.read(reader) == posts[::-1]
    assert s.cache.calls == {"gets_many": 6}  # one batch a read: every text known


def model_view(
    followees: set[str], delivered: list[TimelineEntry], celebrity: list[TimelineEntry], cap: int
) -> list[TimelineEntry]:
    """The definition: entries of authors followed now, one per post (the newest), newest
    first, the first ``cap``."""
    unique: dict[tuple[str, str], TimelineEntry] = {}
    for entry in sorted({*delivered, *celebrity}, reverse=True):
        if entry.author in followees:
            unique.setdefault((entry.author, entry.post_id), entry)
    return list(unique.values())[:cap]


@pytest.mark.parametrize("seed", range(4))
def test_every_page_equals_the_model(
    cache: MemcacheCluster, sqlite_store: SqliteEdgeStore, unique: str, seed: int
) -> None:
    rng = random.Random(seed)
    cap = 40
    s = make(cache, sqlite_store, f"{unique}x{seed}", cap=cap)
    authors = [f"a{i}" for i in range(8)]
    for author in authors[:6]:
        s.follow("me", author)
    s.follow("me", "star")
    s.reader.read("me")
    delivered: list[TimelineEntry] = []
    celebrity: list[TimelineEntry] = []
    for i in range(cap - 5):  # below the cap: nothing trimmed
        ts = 1000 + rng.randrange(30)  # many posts share a millisecond
        roll = rng.random()
        if roll < 0.15:
            s.celebrity_post("star", f"s{i}", ts)
            celebrity.append(TimelineEntry(ts, "star", f"s{i}"))
        elif roll < 0.25 and delivered:  # the same post delivered again with another time
            again = rng.choice(delivered)
            delivered.append(s.post(again.author, again.post_id, ts, ["me"]))
        else:  # some by authors not followed (a delivery that raced an unfollow)
            delivered.append(s.post(rng.choice(authors), f"p{i}", ts, ["me"]))
    # The newest deliveries by authors not followed: a first page must look past them.
    delivered += [s.post(authors[7], f"late{i}", 5000 + i, ["me"]) for i in range(4)]
    want = model_view(set(authors[:6]) | {"star"}, delivered, celebrity, cap)
    for limit in (1, 3, 10, 50):
        got: list[TimelineEntry] = []
        cursor = None
        while True:
            page = s.reader.page("me", limit, cursor)
            assert len(page.entries) <= limit
            got += page.entries
            cursor = page.next
            if cursor is None:
                break
        assert got == want, limit
    assert s.reader.read("me", limit=1000) == want


def displaced_by_late_deliveries(s: Setup, cap: int, late: int) -> list[TimelineEntry]:
    """``me`` follows ``a`` and ``b``; ``a`` posts ``cap`` times; ``me`` unfollows ``b``, and
    ``late`` posts of ``b`` are delivered after (they were in flight during the unfollow).
    Returns ``a``'s posts, oldest first."""
    s.follow("me", "a")
    s.follow("me", "b")
    s.reader.read("me")
    posts = [s.post("a", f"a{i}", 1000 + i, ["me"]) for i in range(cap)]
    s.follow("me", "b", active=False)  # its timeline invalidation ran before these landed
    for i in range(late):
        s.post("b", f"b{i}", 2000 + i, ["me"])
    return posts


def test_a_full_timeline_holding_unfollowed_authors_is_regenerated_at_its_end(
    cache: MemcacheCluster, sqlite_store: SqliteEdgeStore, unique: str
) -> None:
    cap = 10
    s = make(cache, sqlite_store, unique, cap=cap)
    mine = displaced_by_late_deliveries(s, cap, late=cap)
    # The cached timeline holds the cap, all of b: a's posts were trimmed away.
    assert s.reader.read("me", limit=3) == list(reversed(mine))[:3]
    assert s.reader.read("me", limit=cap) == list(reversed(mine))


def test_older_posts_delivered_late_after_a_trim_never_stand_in_for_the_posts_it_pushed_out(
    cache: MemcacheCluster, sqlite_store: SqliteEdgeStore, unique: str
) -> None:
    """A trim keeps the newest ``cap`` members, of followed authors or not. Posts older than
    the trim delivered afterwards (a retried batch, a chunk task held up by a cache outage)
    then sit below it: the timeline is complete only down to its ``cap``-th newest member,
    not down to its oldest one, so they must not fill a page in place of the newer posts the
    trim pushed out."""
    cap = 10
    s = make(cache, sqlite_store, unique, cap=cap)
    newer = displaced_by_late_deliveries(s, cap, late=8 * cap)
    ref = ListRef(ListKind.TIMELINE, "me")
    s.timelines.read(ref)  # a writer's sampled read: compacted to the newest cap, all of b
    key = s.timelines.index_key(ref)
    assert b"!a!" not in s.cache.get_many([key])[key]
    for i in range(cap):  # older posts of a, delivered late
        s.post("a", f"old{i}", 500 + i, ["me"])
    assert s.reader.read("me", limit=cap) == list(reversed(newer))


def test_a_corrupt_timeline_item_is_regenerated(setup: Setup) -> None:
    s = setup
    s.follow("me", "a")
    s.reader.read("me")
    entry = s.post("a", "p1", 1000, ["me"])
    key = s.timelines.index_key(ListRef(ListKind.TIMELINE, "me"))
    s.cache.set_many({key: b"not a token list"})
    assert s.reader.read("me") == [entry]
    # Token-shaped, yet not members of ours: what decodes is not what a reader can show.
    for junk in (b"+junk ", b"+x!a!p9 ", b"+0000000001000!a "):
        s.cache.set_many({key: junk})
        assert s.reader.read("me") == [entry], junk


def test_a_celebrity_posts_item_with_a_member_not_of_our_form_is_rebuilt(setup: Setup) -> None:
    """Dropping only the timeline would meet the same bad celebrity item again: an error (a
    500 from the API) until the item expired. Both are dropped and rebuilt."""
    s = setup
    s.follow("me", "star")
    s.celebrity_post("star", "s1", 1000)
    assert s.reader.read("me") == [TimelineEntry(1000, "star", "s1")]
    (key,) = s.celebrities.keys(["star"])
    assert s.cache.append_many({key: b" nope"})[key] is Outcome.STORED
    assert s.reader.read("me") == [TimelineEntry(1000, "star", "s1")]
    assert b"nope" not in s.cache.get_many([key]).get(key, b"")


def test_a_full_corrupt_timeline_is_dropped_by_the_delivery_that_finds_it(setup: Setup) -> None:
    """An append refused because the item is full trims it; a corrupt one cannot be trimmed:
    it is dropped (and regenerated on its next read), never an error for the fan-out."""
    s = setup
    s.follow("me", "a")
    s.reader.read("me")
    ref = ListRef(ListKind.TIMELINE, "me")
    key = s.timelines.index_key(ref)
    tokens = 1024 * 1024 // 6  # malformed positions, as many as the item holds
    while s.cache.set_many({key: b"+a#zz " * tokens})[key] is not Outcome.STORED:
        tokens -= 1
    entry = s.post("a", "p1", 1000, ["me"])  # delivers: the APPEND is refused as too large
    assert s.timelines.cached_many([ref]) == {}  # dropped
    assert s.reader.read("me") == [entry]


def test_a_celebrity_post_is_shown_at_once_when_refreshed_and_within_the_bound_otherwise(
    cache: MemcacheCluster, sqlite_store: SqliteEdgeStore, unique: str
) -> None:
    ttl_s = 1
    s = make(cache, sqlite_store, unique, ttl_s=ttl_s)
    s.follow("me", "star")
    s.follow("me", "idol")
    s.celebrity_post("star", "s1", 1000)
    assert s.reader.read("me") == [TimelineEntry(1000, "star", "s1")]
    reset(s)
    s.celebrity_post("star", "s2", 1001)  # the fan-out consumer's refresh
    s.celebrity_post("idol", "i1", 1002)  # a new celebrity: the cached set lacks it
    assert [e.post_id for e in s.reader.read("me")] == ["i1", "s2", "s1"]

    # A post whose refresh was lost (a stale refresh racing it, say): shown once the items
    # built before it have expired, ttl_s + 2 s after it was stored, with no refresh at all.
    s.celebrity_post("star", "s3", 1003, refresh=False)
    stored = time.monotonic()
    while "s3" not in [e.post_id for e in s.reader.read("me")]:
        assert time.monotonic() - stored <= ttl_s + 2, "not shown within the bound"
        time.sleep(0.05)
    s.reader.read("me")  # rebuilds what expired since the loop's last read (a busy machine)
    reset(s)
    s.reader.read("me")
    assert s.store.calls == {}  # warm again: the items were rebuilt once, then cached


@pytest.mark.parametrize(
    "member", ["-000000000001!u2!p1", "+000000000001!u2!p1", "0000000000001!u2", "x!u2!p1"]
)
def test_only_cursors_naming_a_member_of_our_own_form_are_accepted(member: str) -> None:
    entry = TimelineEntry(1_700_000_000_000, "u2", "p1")
    assert TimelineEntry.from_cursor(entry.cursor) == entry
    for respelled in (entry.cursor + "!!!!", entry.cursor + "\x00", entry.cursor + "\n", member):
        with pytest.raises(BadCursor):  # one spelling per page
            TimelineEntry.from_cursor(respelled)


def test_a_celebrity_set_too_large_to_cache_is_read_from_the_store_and_said_once(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    s = setup
    s.store.add_celebrities(f"celebrity-{i:054d}" for i in range(20_000))  # > 1 MiB joined
    s.follow("me", "star")
    s.celebrity_post("star", "s1", 1000, refresh=False)
    with caplog.at_level("WARNING", logger="fanout.celebrities"):
        reads = [s.reader.read("me") for _ in range(3)]
    assert reads == [[TimelineEntry(1000, "star", "s1")]] * 3
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1
    assert "over memcached's item size" in caplog.records[0].getMessage()


def test_a_stale_celebrity_item_holding_a_deleted_post_is_rebuilt_so_the_page_stays_full(
    cache: MemcacheCluster, sqlite_store: SqliteEdgeStore, unique: str
) -> None:
    """A celebrity's cached posts written from a store read before a deletion (a zombie's or a
    replay's refresh landing after the live one) hold the deleted post and lack the older post
    shown in its place: the read that finds the post deleted rebuilds them, so the page is the
    store's view, not one short."""
    s = make(cache, sqlite_store, unique, cap=4)
    s.follow("me", "star")
    assert s.reader.read("me") == []  # cached empty: the star's posts come from its item only
    for i in range(6):
        s.celebrity_post("star", f"s{i}", 1000 + i)
    key = s.celebrities.keys(["star"])[0]
    stale = cache.get_many([key])[key]
    ref = PostRef("star", "s5")
    sqlite_store.delete_posts([ref])
    s.reader.bodies.delete([ref])
    s.celebrities.refresh(["star"])
    cache.set_many({key: stale}, 30)  # the late, stale refresh
    assert [e.post_id for e in s.reader.read("me", 4)] == ["s4", "s3", "s2", "s1"]


def delete(s: Setup, *refs: PostRef) -> None:
    """What the fan-out does for a deletion: the store's tombstone, then the bodies."""
    cast(SqliteEdgeStore, s.store).delete_posts(refs)
    s.reader.bodies.delete(refs)


def test_a_run_of_deleted_posts_below_a_page_costs_a_few_rounds_not_one_per_post(
    cache: MemcacheCluster, sqlite_store: SqliteEdgeStore, unique: str
) -> None:
    """The walk reads ahead twice as far each time it finds deleted posts: 700 deleted right
    below a page of 50 are a handful of multi-GETs and body fills, not 700 of each."""
    s = make(cache, sqlite_store, unique, cap=800)
    s.follow("me", "a")
    assert s.reader.read("me") == []
    posts = [s.post("a", f"p{i:03d}", 1000 + i, ["me"]) for i in range(760)]
    delete(s, *(PostRef("a", p.post_id) for p in posts[10:710]))
    cache.delete_many(s.reader.bodies.keys(f"a!{p.post_id}" for p in posts[10:710]))  # evicted
    reset(s)
    page = s.reader.page("me", 50)
    assert page.entries == [*reversed(posts[710:]), *reversed(posts[:10])][:50]
    assert s.cache.calls["gets_many"] <= 12 and s.store.calls["post_bodies"] <= 5


def test_verify_sees_a_full_timeline_that_lost_posts_to_deletions_as_its_reader_does(
    cache: MemcacheCluster, sqlite_store: SqliteEdgeStore, unique: str
) -> None:
    """A full timeline holding a deleted post is regenerated by a reader whose page reaches its
    floor; ``fanout verify`` sees what that reader is shown (the store's view), not a divergence."""
    s = make(cache, sqlite_store, unique, cap=5)
    s.follow("me", "a")
    for i in range(8):
        s.post("a", f"p{i}", 1000 + i, [])
    assert [e.post_id for e in s.reader.read("me", 3)] == ["p7", "p6", "p5"]  # regenerated
    delete(s, PostRef("a", "p7"))
    checker = AntiEntropy(sqlite_store, s.reader, 5, settle_s=0.1)
    assert checker.check(["me"]).kinds[ListKind.TIMELINE].divergent == 0
    assert [e.post_id for e in s.reader.read("me", 10)] == ["p6", "p5", "p4", "p3", "p2"]
