"""Delivering posts into follower timelines.

For a batch: store the posts (durable first, so a regenerated timeline has them), read the
authors' follower lists with multi-GETs, then append to all followers' timelines, pipelined per
memcached server. A batch can be millions of appends, so the reads and the appends go in bounded
steps with a pulse between them (consumers/pulse.py): however long the batch, the consumer stays
in its group. Three paths by follower count:

- ordinary authors: delivered here, in this batch;
- more than ``chunk_size`` followers: the list is cut into chunks published to the task topic,
  so the consumers of the group share one post's fan-out; the post's offset is committed only
  after every chunk is acknowledged by the broker;
- more than ``celebrity_threshold`` followers: not fanned out at all; the author is recorded as a
  celebrity (durably, before the commit), its cached recent posts are rewritten, and readers
  merge those at read time.

A ``post_deleted`` is applied before the batch's posts: the store's tombstone (permanent), then
the post's body item set to deleted (graph/timelines/post_bodies.py: every page reads through
it, so from then on no page shows the post), the author's page item dropped
(graph/timelines/author_pages.py, as after every post stored), and a celebrity author's
cached recent posts rewritten from the store. Timelines keep the post's name: every page reads
through the body, and rendered pages kept by the page memo see the deletion mark the body step
changes (graph/timelines/post_bodies.py). A post of the same batch, or any later one, with a
deleted id is not delivered.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from timeline_fanout.consumers.positions import OFFSET_BITS, Positioned
from timeline_fanout.consumers.pulse import Pulse, no_pulse
from timeline_fanout.graph import ListKind, ListRef, ShardedLists
from timeline_fanout.graph.lists.capped import CappedLists
from timeline_fanout.graph.lists.token_lists import Delivery
from timeline_fanout.graph.lists.tokens import MemberSet, in_sequence, token
from timeline_fanout.graph.model.edges import PostRecord, PostRef, PostsAndCelebrities
from timeline_fanout.graph.timelines.author_pages import AuthorPages
from timeline_fanout.graph.timelines.celebrity_posts import CelebrityPosts
from timeline_fanout.graph.timelines.post_bodies import PostBodies
from timeline_fanout.graph.timelines.reader import TimelineEntry
from timeline_fanout.producers import InternalPublisher, PublishError
from timeline_fanout.schemas import FanoutTask, Post, PostDeleted, fanout_task

FANOUT_EVENTS = (Post, PostDeleted, FanoutTask)
# Steps between pulses, each a fraction of a second at the measured rates (docs/performance.md).
AUTHORS_PER_READ = 250  # follower lists per multi-GET (each up to chunk_size members)
APPENDS_PER_WAVE = 50_000  # timeline appends per pipelined wave


@dataclass
class FanoutStats:
    posts: int = 0
    deliveries: int = 0  # timeline appends made (the timeline was cached)
    skipped: int = 0  # deliveries to timelines not in the cache: regenerated on their next read
    chunks_published: int = 0
    celebrity_posts: int = 0
    deleted: int = 0
    latencies_ms: deque[int] = field(default_factory=lambda: deque(maxlen=100_000))


class FanoutApplier:
    accepted: tuple[type, ...] = FANOUT_EVENTS

    def __init__(
        self,
        store: PostsAndCelebrities,
        follow_lists: ShardedLists,
        timelines: CappedLists,
        tasks: InternalPublisher,
        chunk_size: int,
        celebrity_threshold: int,
        celebrity_posts: CelebrityPosts,
        bodies: PostBodies,
        author_pages: AuthorPages,
    ) -> None:
        self.store = store
        self.follow_lists = follow_lists
        self.timelines = timelines
        self.tasks = tasks
        self.chunk_size = chunk_size
        self.celebrity_threshold = celebrity_threshold
        self.celebrity_posts = celebrity_posts
        self.bodies = bodies
        self.author_pages = author_pages
        self.stats = FanoutStats()

    def apply(self, batch: Sequence[Positioned], pulse: Pulse = no_pulse) -> None:
        posts: list[PostRecord] = []
        chunks: list[FanoutTask] = []
        deletions: list[PostRef] = []
        for item in batch:
            event = item.event
            if isinstance(event, Post):
                ts = item.pos >> OFFSET_BITS  # the envelope ts, or the broker's stand-in
                posts.append(PostRecord(event.author, event.post_id, ts, event.text))
            elif isinstance(event, PostDeleted):
                deletions.append(PostRef(event.author, event.post_id))
            elif isinstance(event, FanoutTask):
                chunks.append(event)
        if deletions:
            self._delete(deletions)
            pulse()
        if posts:
            # The stored time is the post's time: a post published twice with a new ``ts`` is
            # delivered as the same timeline entry as the first time. A deleted post is not in
            # the answer, and is not delivered.
            stored = self.bodies.store(posts)
            self.author_pages.invalidate([p.author for p in posts])
            posts = [stored[ref] for p in posts if (ref := PostRef(p.author, p.post_id)) in stored]
            pulse()
        deliveries: list[Delivery] = []
        delivered_posts: list[int] = []
        celebrities: set[str] = set()
        for post, followers in self._followers(posts, pulse):
            if len(followers) > self.celebrity_threshold:
                celebrities.add(post.author)
            elif len(followers) > self.chunk_size:
                self._publish_chunks(post, in_sequence(followers))
            else:
                deliveries.append(
                    Delivery(token(True, TimelineEntry.of(post).member), in_sequence(followers))
                )
                delivered_posts.append(post.ts)
        for task in chunks:
            entry = TimelineEntry(task.post_ts, task.author, task.post_id)
            deliveries.append(Delivery(token(True, entry.member), task.followers))
            delivered_posts.append(task.post_ts)
        self.stats.celebrity_posts += sum(p.author in celebrities for p in posts)
        if celebrities:  # durable before the commit: readers merge their posts from now on
            self.store.add_celebrities(celebrities)
            # Readers merge them from cached items: rewritten now, after the store write, so
            # the posts show at once (graph/timelines/celebrity_posts.py has the staleness bound).
            self.celebrity_posts.refresh(celebrities)
        self._confirm_chunks()
        for wave in waves(deliveries, APPENDS_PER_WAVE):
            delivered = self.timelines.deliver(wave)
            self.stats.deliveries += delivered.appended
            self.stats.skipped += len(delivered.skipped)
            pulse()
        self._account(posts, delivered_posts)

    def _delete(self, posts: list[PostRef]) -> None:
        """Tombstones, then body items (and the deletion mark), author pages and celebrities'
        cached posts: each step after the store write it depends on, each idempotent, so a
        retried batch repeats them all."""
        self.store.delete_posts(posts)
        self.bodies.delete(posts)
        self.author_pages.invalidate([p.author for p in posts])
        celebrities = {p.author for p in posts} & self.store.celebrities()
        self.celebrity_posts.refresh(celebrities)
        self.stats.deleted += len(posts)

    def _followers(
        self, posts: list[PostRecord], pulse: Pulse
    ) -> Iterator[tuple[PostRecord, MemberSet]]:
        for start in range(0, len(posts), AUTHORS_PER_READ):
            some = posts[start : start + AUTHORS_PER_READ]
            refs = [ListRef(ListKind.FOLLOWERS, p.author) for p in some]
            lists = self.follow_lists.read_many(refs)
            pulse()
            yield from ((p, lists[ref]) for p, ref in zip(some, refs, strict=True))

    def _publish_chunks(self, post: PostRecord, followers: Sequence[str]) -> None:
        for chunk, start in enumerate(range(0, len(followers), self.chunk_size)):
            part = followers[start : start + self.chunk_size]
            self.tasks.publish(fanout_task(post.author, post.post_id, post.ts, chunk, part))
            self.stats.chunks_published += 1

    def _confirm_chunks(self) -> None:
        report = self.tasks.flush()
        if not report.ok:  # transient for the loop: the batch is retried, never committed
            raise PublishError(report)

    def _account(self, posts: list[PostRecord], delivered_posts: list[int]) -> None:
        now_ms = time.time_ns() // 1_000_000
        self.stats.posts += len(posts)
        self.stats.latencies_ms.extend(now_ms - ts for ts in delivered_posts)


def waves(deliveries: Sequence[Delivery], size: int) -> Iterator[list[Delivery]]:
    """The deliveries cut into waves of at most ``size`` appends (a long follower list is cut
    across waves). Appends commute, so the cut changes nothing but the pulse points."""
    wave: list[Delivery] = []
    appends = 0
    for tok, followers in deliveries:
        for start in range(0, len(followers), size):
            part = followers[start : start + size]
            if wave and appends + len(part) > size:
                yield wave
                wave, appends = [], 0
            wave.append(Delivery(tok, part))
            appends += len(part)
    if wave:
        yield wave
