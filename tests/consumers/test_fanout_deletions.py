"""Deleted posts, end to end on the real local stack: gone from every page, in any order, for
good, and the pages still as long as the store's."""

from __future__ import annotations

import random

import pytest

from tests.consumers.test_fanout_consumer import (
    USERS,
    build_graph,
    consume,
    expected_timelines,
)
from timeline_fanout.cli import wiring
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph.timelines.reader import TimelineEntry

CAP = 15


def pages(settings: Settings) -> dict[str, list[tuple[TimelineEntry, str | None]]]:
    """Every user's timeline, walked page by page (7 at a time), with the texts shown."""
    reader = wiring.timeline_reader(settings, wiring.edge_store(settings))
    shown: dict[str, list[tuple[TimelineEntry, str | None]]] = {}
    for user in USERS:
        walked: list[tuple[TimelineEntry, str | None]] = []
        cursor = None
        while True:
            page = reader.page(user, 7, cursor)
            walked += zip(page.entries, page.texts, strict=True)
            if page.next is None:
                break
            cursor = page.next
        shown[user] = walked
    return shown


@pytest.mark.edge_stores("sqlite", "ferretdb-collection")
def test_deleted_posts_leave_every_page_before_or_after_delivery_and_stay_deleted(
    settings: Settings,
) -> None:
    settings = settings.model_copy(
        update={"timeline_max": CAP, "chunk_size": 20, "celebrity_threshold": 60}
    )
    rng = random.Random(5)
    with wiring.publisher(settings) as publisher:
        model = build_graph(publisher, rng)
    consume(settings, "graph")
    reader = wiring.timeline_reader(settings, wiring.edge_store(settings))
    for user in USERS:
        reader.read(user)  # cached: deliveries append to them

    posts: list[TimelineEntry] = []
    texts: dict[str, str] = {}
    early = {f"p{i}" for i in range(0, 200, 13)}  # deleted before they are published
    with wiring.publisher(settings) as publisher:
        for post_id in sorted(early):
            author = "u0" if post_id.endswith("0") else "u1"
            publisher.publish({"type": "post_deleted", "author": author, "post_id": post_id})
    consume(settings, "fanout")
    for author in ("u0", "u1"):  # their (empty) author items are cached from here on
        assert reader.author_pages.page(author, 10, None).posts == []
    with wiring.publisher(settings) as publisher:
        for i in range(200):
            post_id = f"p{i}"
            author = "u0" if i % 10 == 0 else "u1" if i % 10 == 1 else rng.choice(USERS)
            if post_id in early:
                author = "u0" if post_id.endswith("0") else "u1"
            texts[post_id] = f"<b>{post_id}</b> by {author}"
            event = {"type": "post", "author": author, "post_id": post_id}
            sent = publisher.publish({**event, "text": texts[post_id]})
            assert sent.ts is not None
            posts.append(TimelineEntry(sent.ts, author, post_id))
    consume(settings, "fanout")

    live = [p for p in posts if p.post_id not in early]
    expected = expected_timelines(model, live, CAP)
    assert any(len(t) == CAP for t in expected.values())
    assert {u: [e for e, _ in shown] for u, shown in pages(settings).items()} == expected

    # Deleted after delivery: the newest posts of full timelines, a celebrity's, a chunked
    # author's. Pages stay as long as the store's (older posts come up from regeneration).
    for author in ("u0", "u1"):
        page = reader.author_pages.page(author, 500, None)
        assert [p.post_id for p in page.posts] == [
            p.post_id for p in sorted(live, reverse=True) if p.author == author
        ]
    late = {p.post_id for p in sorted(live, reverse=True)[:40:2]}
    late |= {p.post_id for p in live if p.author in ("u0", "u1") and p.post_id < "p4"}
    with wiring.publisher(settings) as publisher:
        for p in live:
            if p.post_id in late:
                publisher.publish(
                    {"type": "post_deleted", "author": p.author, "post_id": p.post_id}
                )
    consume(settings, "fanout")
    live = [p for p in live if p.post_id not in late]
    expected = expected_timelines(model, live, CAP)
    shown = pages(settings)
    assert {u: [e for e, _ in s] for u, s in shown.items()} == expected
    assert all(text == texts[e.post_id] for s in shown.values() for e, text in s)
    assert sum(len(t) == CAP for t in expected.values()) > 10  # capped pages were exercised

    for author in ("u0", "u1"):  # author pages, read before and after the deletions
        mine = sorted((p for p in live if p.author == author), reverse=True)
        page = reader.author_pages.page(author, 500, None)
        assert [(p.post_id, p.text) for p in page.posts] == [
            (p.post_id, texts[p.post_id]) for p in mine
        ]

    # A replay of the posts from the beginning publishes nothing deleted again; and a cache
    # loss regenerates the same pages.
    replay = settings.model_copy(update={"group": settings.group + "-replay"})
    consume(replay, "fanout")
    assert {u: [e for e, _ in s] for u, s in pages(settings).items()} == expected
    reader.timelines.cache.flush_all()
    assert {u: [e for e, _ in s] for u, s in pages(settings).items()} == expected
