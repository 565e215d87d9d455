"""Fan-out end to end on the real local stack: graph, then posts, then timelines vs a model."""

from __future__ import annotations

import random
import threading

import orjson
import pytest
from confluent_kafka import Producer

from tests.conftest import run_cli
from tests.kafka_helpers import read_topic
from timeline_fanout.cli import wiring
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph import ListKind, ListRef
from timeline_fanout.graph.timelines.reader import TimelineEntry
from timeline_fanout.producers import EventPublisher

Edge = tuple[str, str]
USERS = [f"u{i}" for i in range(80)]


def build_graph(publisher: EventPublisher, rng: random.Random) -> dict[Edge, bool]:
    """u0 is a celebrity (above the threshold), u1 is big enough to be chunked."""
    model: dict[Edge, bool] = {}

    def follow(a: str, b: str, on: bool = True) -> None:
        if a != b:
            kind = "follow" if on else "unfollow"
            publisher.publish({"type": kind, "follower": a, "followee": b})
            model[(a, b)] = on

    for user in USERS[1:71]:
        follow(user, "u0")
    for user in rng.sample(USERS, 50):
        follow(user, "u1")
    for _ in range(600):
        follow(rng.choice(USERS), rng.choice(USERS[2:]), rng.random() < 0.75)
    return model


def expected_timelines(
    model: dict[Edge, bool], posts: list[TimelineEntry], cap: int
) -> dict[str, list[TimelineEntry]]:
    result = {}
    for user in USERS:
        followees = {b for (a, b), on in model.items() if on and a == user}
        mine = [p for p in posts if p.author in followees]
        result[user] = sorted(mine, reverse=True)[:cap]
    return result


def consume(settings: Settings, which: str) -> str:
    done = run_cli(settings, "consume", which, "--until-idle", "3")
    assert done.returncode == 0, done.stderr.decode()
    return done.stderr.decode()


def read_all(settings: Settings) -> dict[str, list[TimelineEntry]]:
    reader = wiring.timeline_reader(settings, wiring.edge_store(settings))
    return {user: reader.read(user, limit=1000) for user in USERS}


@pytest.mark.edge_stores("sqlite", "ferretdb-collection")
@pytest.mark.tansu_smoke
def test_timelines_equal_the_model_through_chunks_celebrities_unfollows_and_flushes(
    settings: Settings,
) -> None:
    settings = settings.model_copy(
        update={"timeline_max": 15, "chunk_size": 20, "celebrity_threshold": 60}
    )
    rng = random.Random(21)
    with wiring.publisher(settings) as publisher:
        model = build_graph(publisher, rng)
    consume(settings, "graph")
    assert all(t == [] for t in read_all(settings).values())  # cached: deliveries append

    posts: list[TimelineEntry] = []
    with wiring.publisher(settings) as publisher:
        for i in range(160):
            author = "u0" if i % 10 == 0 else "u1" if i % 10 == 1 else rng.choice(USERS)
            sent = publisher.publish({"type": "post", "author": author, "post_id": f"p{i}"})
            assert sent.ts is not None
            posts.append(TimelineEntry(sent.ts, author, f"p{i}"))
    consume(settings, "fanout")

    store = wiring.edge_store(settings)
    assert store.celebrities() == {"u0"}
    expected = expected_timelines(model, posts, 15)
    # The deliveries reached the cached timelines themselves (not a regeneration on read).
    timelines = wiring.timeline_reader(settings, store).timelines
    cached = timelines.cached_many([ListRef(ListKind.TIMELINE, u) for u in USERS])
    assert len(cached) == len(USERS)
    for user in USERS:
        delivered = {e.member for e in expected[user] if e.author != "u0"}
        assert delivered <= cached[ListRef(ListKind.TIMELINE, user)], user
    assert sum(len(m) for m in cached.values()) > 100
    assert read_all(settings) == expected
    assert any(len(t) == 15 for t in expected.values())  # the cap was really exercised

    # Unfollows after delivery: the posts of that author vanish from the reader's timeline.
    with wiring.publisher(settings) as publisher:
        for user in ("u5", "u6"):
            for (a, b), on in list(model.items()):
                if a == user and on:
                    publisher.publish({"type": "unfollow", "follower": a, "followee": b})
                    model[(a, b)] = False
                    break
    consume(settings, "graph")
    expected = expected_timelines(model, posts, 15)
    assert read_all(settings) == expected

    # Cache loss: every timeline and list is regenerated from the edge store.
    wiring.list_store(settings, store).cache.flush_all()
    assert read_all(settings) == expected

    # A replay of the posts (at-least-once) never shows a post twice.
    replay = settings.model_copy(update={"group": settings.group + "-replay"})
    consume(replay, "fanout")
    assert read_all(settings) == expected

    assert len(expected["u3"]) > 3
    cli = run_cli(settings, "timeline", "u3", "--json", "--limit", "3")
    page = orjson.loads(cli.stdout)
    assert page == {
        "user": "u3",
        "posts": [
            {"post_id": e.post_id, "author": e.author, "ts": e.ts, "text": None}
            for e in expected["u3"][:3]
        ],
        "next": expected["u3"][2].cursor,
    }
    after = orjson.loads(
        run_cli(settings, "timeline", "u3", "--json", "--before", page["next"]).stdout
    )
    assert [(p["author"], p["post_id"]) for p in after["posts"]] == [
        (e.author, e.post_id) for e in expected["u3"][3:]
    ]
    assert after["next"] is None  # the last page says so


def test_a_celebrity_stays_one_so_its_posts_reach_cached_timelines_after_it_shrinks(
    settings: Settings,
) -> None:
    """Celebrity status is sticky: a post skipped by the fan-out while its author was a
    celebrity lives only in the store, so readers must keep merging that author's posts even
    after unfollows take it under the threshold, or cached timelines would lose it."""
    settings = settings.model_copy(update={"celebrity_threshold": 3})
    fans = [f"fan{i}" for i in range(5)]
    with wiring.publisher(settings) as publisher:
        for fan in fans:
            publisher.publish({"type": "follow", "follower": fan, "followee": "star"})
        for fan in fans[:3]:  # 3 followers: not above the threshold
            publisher.publish({"type": "follow", "follower": fan, "followee": "plain"})
    consume(settings, "graph")
    store = wiring.edge_store(settings)
    reader = wiring.timeline_reader(settings, store)
    refs = [ListRef(ListKind.TIMELINE, fan) for fan in fans]
    reader.timelines.read_many(refs)  # cached: deliveries append to them

    def post(author: str, post_id: str) -> TimelineEntry:
        with wiring.publisher(settings) as publisher:
            sent = publisher.publish({"type": "post", "author": author, "post_id": post_id})
        assert sent.ts is not None
        consume(settings, "fanout")
        return TimelineEntry(sent.ts, author, post_id)

    first = post("star", "s1")  # 5 followers > 3: a celebrity, not fanned out
    assert store.celebrities() == {"star"}
    with wiring.publisher(settings) as publisher:
        for fan in fans[2:]:
            publisher.publish({"type": "unfollow", "follower": fan, "followee": "star"})
    consume(settings, "graph")  # star: 2 followers now, under the threshold
    second = post("star", "s2")  # fanned out again (and still merged: one entry per post)
    third = post("plain", "q1")
    assert store.celebrities() == {"star"}

    cached = reader.timelines.cached_many(refs[:2])  # fan0, fan1: followed nothing new
    assert set(cached) == set(refs[:2])
    for members in cached.values():
        assert members == {second.member, third.member}  # s1 lives only in the store
    expected = [[third, second, first]] * 2 + [[third], [], []]
    assert [reader.read(fan) for fan in fans] == expected
    reader.timelines.cache.flush_all()  # regenerated from the store: the same answers
    assert [reader.read(fan) for fan in fans] == expected
    store.close()


@pytest.mark.edge_stores("sqlite", "ferretdb-index")
def test_a_big_post_reaches_every_follower_exactly_once_with_two_consumers(
    settings: Settings,
) -> None:
    settings = settings.model_copy(update={"chunk_size": 25, "celebrity_threshold": 10_000})
    fans = [f"fan{i}" for i in range(230)]  # > 9 chunks
    with wiring.publisher(settings) as publisher:
        for fan in fans:
            publisher.publish({"type": "follow", "follower": fan, "followee": "big"})
    consume(settings, "graph")
    with wiring.publisher(settings) as publisher:
        post = publisher.publish({"type": "post", "author": "big", "post_id": "hello"})
    chunks: list[int] = []

    def consumer() -> None:  # each with its own connections, as separate processes would be
        loop = wiring.fanout_loop(settings, threading.Event())
        loop.run(until_idle=6.0)
        loop.source.close()
        chunks.append(loop.applier.stats.chunks_published)  # type: ignore[attr-defined]

    threads = [threading.Thread(target=consumer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    reader = wiring.timeline_reader(settings, wiring.edge_store(settings))
    entry = TimelineEntry(post.ts or 0, "big", "hello")
    assert all(reader.read(fan) == [entry] for fan in fans)
    assert sum(chunks) == 10


def test_each_topic_admits_only_its_own_event_types(settings: Settings) -> None:
    """A fan-out task forged by an app on the posts topic (it would deliver to any timeline it
    names) is dead-lettered, never applied; so is a post on the internal task topic."""
    with wiring.publisher(settings) as publisher:
        publisher.publish({"type": "follow", "follower": "victim", "followee": "u1"})
    consume(settings, "graph")
    reader = wiring.timeline_reader(settings, wiring.edge_store(settings))
    assert reader.read("victim") == []  # now cached: an applied task would show in it
    forged = orjson.dumps(
        {
            "type": "fanout_task",
            "author": "u1",
            "post_id": "spam",
            "post_ts": 1_700_000_000_000,
            "chunk": 0,
            "followers": ["victim"],
        }
    )
    misplaced = orjson.dumps({"type": "post", "author": "u1", "post_id": "sideways"})
    producer = Producer({"bootstrap.servers": settings.kafka})
    producer.produce(settings.topics.posts, key=b"u1", value=forged)
    producer.produce(settings.topics.fanout_tasks, key=b"u1", value=misplaced)
    producer.flush(10)
    with wiring.publisher(settings) as publisher:
        post = publisher.publish({"type": "post", "author": "u1", "post_id": "real"})
    consume(settings, "fanout")
    assert reader.read("victim") == [TimelineEntry(post.ts or 0, "u1", "real")]
    dead = {
        m.value(): dict(m.headers()) for m in read_topic(settings.kafka, settings.topics.dlq, 2)
    }
    assert dead[forged]["fanout.dlq.reason"].decode() == (
        f"type: fanout_task events do not belong on {settings.topics.posts}"
    )
    assert dead[misplaced]["fanout.dlq.reason"].decode() == (
        f"type: post events do not belong on {settings.topics.fanout_tasks}"
    )


def test_a_celebrity_post_shows_at_once_because_the_consumer_refreshes_the_cached_items(
    settings: Settings,
) -> None:
    """The cached celebrity set and posts live an hour here, so only the fan-out consumer's
    refresh can make a new celebrity and its posts visible; a warm read queries no store."""
    settings = settings.model_copy(
        update={"celebrity_threshold": 3, "celebrity_cache_s": 3600, "chunk_size": 2}
    )
    fans = [f"fan{i}" for i in range(5)]
    with wiring.publisher(settings) as publisher:
        for fan in fans:
            publisher.publish({"type": "follow", "follower": fan, "followee": "star"})
    consume(settings, "graph")
    reader = wiring.timeline_reader(settings, wiring.edge_store(settings))
    assert reader.read("fan0") == []  # caches an empty celebrity set, for an hour

    def post(post_id: str) -> TimelineEntry:
        with wiring.publisher(settings) as publisher:
            sent = publisher.publish({"type": "post", "author": "star", "post_id": post_id})
        loop = wiring.fanout_loop(settings, threading.Event())
        loop.run(until_idle=2.0)
        loop.source.close()
        return TimelineEntry(sent.ts or 0, "star", post_id)

    first = post("s1")
    assert reader.read("fan0") == [first]
    second = post("s2")
    assert reader.read("fan0") == [second, first]
    assert all(reader.read(fan) == [second, first] for fan in fans)
