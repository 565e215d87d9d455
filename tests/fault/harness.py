"""The fault suite's model of what the events say, the comparison with what the system holds,
and the consumer processes it kills and restarts."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conftest import settings_env
from timeline_fanout.cli import wiring
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph import ListKind, ListRef
from timeline_fanout.graph.lists.counts import list_counts
from timeline_fanout.graph.model.edges import EdgeCounts
from timeline_fanout.graph.timelines.reader import TimelineEntry, TimelineReader
from timeline_fanout.producers import EventPublisher


def record(figures: dict[str, Any], counts: Counter[str] | dict[str, int]) -> None:
    """Adds a scenario's counts to its figures (tests/fault/report.py sums them over scenarios)."""
    for key, value in counts.items():
        figures[key] = figures.get(key, 0) + value


SIZE = int(os.environ.get("FANOUT_FAULT_EVENTS", "2000"))
KILLS = int(os.environ.get("FANOUT_FAULT_KILLS", "2"))
# The scenarios on FerretDB as well (``edge_stores`` marker, tests/mongo_servers.py) where
# FANOUT_FAULT_MONGO=1: about a minute each on its SQLite backend, which scans a collection for
# every non-_id filter, so CI runs them in a step of their own, one at a time and smaller
# (.ci/run, docs/edge-store.md); one following mode each, both for the replay.
MONGO = os.environ.get("FANOUT_FAULT_MONGO") == "1"
MONGO_STORES = ("ferretdb-collection",) if MONGO else ()
MONGO_BOTH_MODES = ("ferretdb-collection", "ferretdb-index") if MONGO else ()


@dataclass
class Model:
    """The final state the events define: edges, and the posts each timeline must show (a
    post deleted at any time, before or after it was published, never)."""

    cap: int
    edges: dict[tuple[str, str], bool] = field(default_factory=dict)
    posts: list[TimelineEntry] = field(default_factory=list)
    users: set[str] = field(default_factory=set)
    removals: int = 0
    deleted: set[tuple[str, str]] = field(default_factory=set)  # (author, post id)
    ahead: list[tuple[str, str]] = field(default_factory=list)  # deleted, not published yet

    def live(self) -> list[TimelineEntry]:
        return [p for p in self.posts if (p.author, p.post_id) not in self.deleted]

    def followers(self, user: str) -> set[str]:
        return {a for (a, b), on in self.edges.items() if on and b == user}

    def following(self, user: str) -> set[str]:
        return {b for (a, b), on in self.edges.items() if on and a == user}

    def timeline(self, user: str) -> list[TimelineEntry]:
        followees = self.following(user)
        return sorted((p for p in self.live() if p.author in followees), reverse=True)[: self.cap]


def publish_mix(
    publisher: EventPublisher, model: Model, count: int, seed: int, users: int = 60
) -> None:
    """Follows (with re-follows), unfollows, posts, deletions and a few removals, recorded in
    the model as acknowledged. About one post in ten is deleted: mostly one of the last
    hundred (what capped timelines show, most already delivered by the time its deletion is
    consumed; a post and its deletion in one batch are never delivered), else one not
    published yet (its post comes later: the deletion arrives first), and now and then a
    deleted post's id is published again (it stays deleted)."""
    rng = random.Random(seed)
    names = [f"u{i}" for i in range(users)]
    model.users.update(names)
    for i in range(count):
        roll = rng.random()
        if roll < 0.005:  # a removal: every edge of the user switched off
            gone = rng.choice(names)
            # A millisecond of its own: an event of the removal's millisecond on another
            # partition is the documented same-millisecond hole, not a fault.
            time.sleep(0.002)
            publisher.publish({"type": "user_removed", "user": gone})
            model.removals += 1
            for edge in model.edges:
                if gone in edge:
                    model.edges[edge] = False
            time.sleep(0.002)
            continue
        if roll < 0.025:
            publish_deletion(publisher, model, rng, f"p{seed}x{i}", names)
            continue
        if roll < 0.2:
            author = names[min(int(rng.expovariate(0.15)), users - 1)]  # a few post a lot
            post_id = f"p{seed}x{i}"
            if model.ahead and rng.random() < 0.1:  # a post whose deletion came first
                author, post_id = model.ahead.pop(0)
            sent = publisher.publish({"type": "post", "author": author, "post_id": post_id})
            assert sent.ts is not None
            model.posts.append(TimelineEntry(sent.ts, author, post_id))
            continue
        follower = rng.choice(names)
        followee = names[min(int(rng.expovariate(0.1)), users - 1)]  # Zipf-like popularity
        if follower == followee:
            continue
        active = roll < 0.75
        kind = "follow" if active else "unfollow"
        publisher.publish({"type": kind, "follower": follower, "followee": followee})
        model.edges[(follower, followee)] = active


def publish_deletion(
    publisher: EventPublisher, model: Model, rng: random.Random, fresh: str, names: list[str]
) -> None:
    """One ``post_deleted`` (or a deleted post's id published again), recorded in the model."""
    live = model.live()[-100:]
    roll = rng.random()
    if roll < 0.65 and live:
        post = rng.choice(live)
        author, post_id = post.author, post.post_id
    elif roll < 0.8 and model.deleted:
        author, post_id = rng.choice(sorted(model.deleted))
        publisher.publish({"type": "post", "author": author, "post_id": post_id})
        return
    else:
        author, post_id = rng.choice(names), fresh
        model.ahead.append((author, post_id))
    publisher.publish({"type": "post_deleted", "author": author, "post_id": post_id})
    model.deleted.add((author, post_id))


def delete_shown(publisher: EventPublisher, model: Model, seed: int, count: int = 20) -> None:
    """Deletions of ``count`` posts that timelines show now, published after the stream: the
    posts are in cached timelines by now (readers keep them cached) and no follow comes after
    to regenerate those, so every page must skip them, and a capped timeline that lost
    entries to them must still page exactly (regenerated at its floor)."""
    shown = sorted({p for user in sorted(model.users) for p in model.timeline(user)})
    for post in random.Random(seed).sample(shown, min(count, len(shown))):
        publisher.publish({"type": "post_deleted", "author": post.author, "post_id": post.post_id})
        model.deleted.add((post.author, post.post_id))


def pages(reader: TimelineReader, user: str, limit: int) -> list[TimelineEntry]:
    """A home timeline walked page by page, each from the previous page's cursor."""
    entries: list[TimelineEntry] = []
    cursor: str | None = None
    while True:
        page = reader.page(user, limit, cursor)
        entries += page.entries
        if page.next is None:
            return entries
        cursor = page.next


def compare(settings: Settings, model: Model) -> Counter[str]:
    """Every user's followers, following and timeline against the model, plus the edge store.

    Timelines are read once the celebrity staleness bound has passed since the consumers
    stopped (docs/guarantees.md: a celebrity's post, or an author becoming a celebrity, shows
    within FANOUT_CELEBRITY_CACHE_S + 2 s): an author who crossed the threshold in the last
    seconds of a run may be missing from a celebrity set a reader cached just before."""
    time.sleep(settings.celebrity_cache_s + 2)
    store = wiring.edge_store(settings)
    lists = wiring.list_store(settings, store)
    reader = wiring.timeline_reader(settings, store)
    counts = list_counts(store, lists)
    users = sorted(model.users)
    refs = [ListRef(kind, u) for u in users for kind in (ListKind.FOLLOWERS, ListKind.FOLLOWING)]
    cached = lists.read_many(refs)
    found: Counter[str] = Counter()
    for user in users:
        for kind, expected in (
            (ListKind.FOLLOWERS, model.followers(user)),
            (ListKind.FOLLOWING, model.following(user)),
        ):
            got = cached[ListRef(kind, user)]
            found["lost"] += len(expected - got)
            found["resurrected"] += len(got - expected)
            found["list_truncated"] += len(got) < len(expected)
        found["edge_divergent"] += set(store.followers(user, limit=100_000)) != model.followers(
            user
        )
        expected_counts = EdgeCounts(len(model.followers(user)), len(model.following(user)))
        found["count_wrong"] += counts.counts(user) != expected_counts
        timeline = reader.read(user, limit=model.cap)
        paged = pages(reader, user, limit=7)  # deep pages count live posts above the cursor
        expected_timeline = model.timeline(user)
        found["timeline_missing"] += len(set(expected_timeline) - set(timeline))
        found["timeline_wrong"] += timeline != expected_timeline or paged != expected_timeline
        found["deleted_shown"] += sum(
            (e.author, e.post_id) in model.deleted for e in {*timeline, *paged}
        )
    # Every post the run published, and no more: FerretDB's sort with a limit allocates room for
    # the limit up front (a limit of 10**9 took its server to 23 GB and the OOM killer).
    everything = max(len(model.posts), 1)
    stored = {(p.author, p.post_id) for p in store.recent_posts(model.users, everything)}
    found["acked_not_stored"] += sum((p.author, p.post_id) not in stored for p in model.live())
    store.close()
    return found


def run_under_fault(
    settings: Settings, logs: Path, fault: Callable[[], None], seed: int
) -> tuple[Model, list[ConsumerProcess]]:
    """Consume a mixed stream with both consumers running, inject ``fault`` halfway through
    publishing, let the consumers catch up; returns the model and the consumer processes."""
    model = Model(cap=settings.timeline_max)
    consumers = [ConsumerProcess(settings, which, logs) for which in ("graph", "fanout")]
    halfway = threading.Event()

    def produce() -> None:
        with wiring.publisher(settings) as publisher:
            for round_ in range(20):
                publish_mix(publisher, model, SIZE // 20, seed=seed * 100 + round_)
                publisher.flush()
                if round_ == 9:
                    halfway.set()
                time.sleep(0.5)
            delete_shown(publisher, model, seed)

    done = threading.Event()

    def read() -> None:
        """An app's readers: lists and timelines stay cached, so deliveries and list writes
        really append under the fault (without readers every write would be skipped and the
        final comparison would only test regeneration); and a few users' first pages, which
        fill post bodies lost to the fault while deletions land."""
        store = wiring.edge_store(settings)
        lists = wiring.list_store(settings, store)
        reader = wiring.timeline_reader(settings, store)
        counts = list_counts(store, lists)
        turn = 0
        while not done.is_set():
            users = sorted(model.users)
            kinds = (ListKind.FOLLOWERS, ListKind.FOLLOWING)
            try:
                lists.read_many([ListRef(kind, u) for u in users for kind in kinds])
                reader.timelines.read_many([ListRef(ListKind.TIMELINE, u) for u in users])
                for user in users[turn % max(len(users), 1) :][:8]:
                    reader.page(user, limit=model.cap)
                    counts.counts(user)  # cached where the store does not keep counts
            except Exception:  # a fault under way (a server down): readers retry later
                pass
            turn += 8
            done.wait(0.3)
        store.close()

    producer = threading.Thread(target=produce)
    readers = threading.Thread(target=read)
    producer.start()
    readers.start()
    halfway.wait()
    fault()
    producer.join()
    for consumer in consumers:
        consumer.finish()
    done.set()
    readers.join()
    return model, consumers


def fault_settings(settings: Settings) -> Settings:
    """Small caps and thresholds so that every delivery path runs under faults.

    On FerretDB one store call of a 200-edge batch takes seconds (its SQLite backend scans the
    collection for every filter but ``_id``; past 30 s seen beside another scenario on two
    busy cores), longer than the 6 s poll interval that makes kicks part of the SQLite runs.
    There the interval is 120 s, over the store's 60 s socket timeout, so that a slow call
    never gets a static member fenced (docs/operations.md, "Long batches") and the scenarios
    test the store, not a test server's speed."""
    on_ferretdb = settings.edge_store.startswith("mongodb")
    return settings.model_copy(
        update={
            "timeline_max": 20,
            "chunk_size": 15,
            "celebrity_threshold": 40,
            "celebrity_cache_s": 1,
            "max_poll_interval_ms": 120_000 if on_ferretdb else 6000,
            "batch_size": 200,
            "graph_batch_size": 200,
        }
    )


class ConsumerProcess:
    """A `fanout consume` process that can be SIGKILLed and restarted."""

    def __init__(
        self, settings: Settings, which: str, logs: Path, member: str | None = "fault"
    ) -> None:
        # Every incarnation is the same static member, as under a supervisor that restarts it;
        # ``member=None``: a dynamic member (it leaves the group when it stops).
        instance = f"{member}-{which}" if member is not None else ""
        self.settings = settings.model_copy(update={"instance_id": instance})
        self.which = which
        self.log = logs / f"{member or 'dynamic'}-{which}.log"  # every incarnation's stderr
        self.kills = 0
        self.crashes = 0
        self.proc = self._start()

    def _start(self, *extra: str) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "timeline_fanout", "-v", "consume", self.which, *extra],
                env=settings_env(self.settings),
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    def kill_and_restart(self) -> None:
        if self.proc.poll() is not None:  # it died by itself: that is a crash
            self.crashes += 1
        else:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.kills += 1
        self.proc = self._start()

    def retries(self) -> int:
        """Transient failures the incarnations logged (and retried) so far."""
        return self.log.read_text(errors="replace").count("transient failure")

    def kicked(self) -> int:
        """Times an incarnation was put out of its group for not polling (librdkafka's MAXPOLL
        line, or the loop's own warning about it)."""
        text = self.log.read_text(errors="replace")
        return text.count("|MAXPOLL|") + text.count("left the group: no poll")

    def wait_assigned(self, times: int = 1, timeout: float = 90) -> None:
        """Until this member has logged ``times`` assignments (a condition on its log)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.log.read_text(errors="replace").count("partitions assigned") >= times:
                return
            time.sleep(0.1)
        raise AssertionError(f"{self.log.name}: not assigned {times}x within {timeout}s")

    def kill(self) -> None:
        """Cleanup after a failed test: no process outlives it."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        """SIGTERM: finish the batch in hand, commit, leave; a crash if it does not exit 0."""
        self.proc.send_signal(signal.SIGTERM)
        if self.proc.wait(timeout=120) != 0:
            self.crashes += 1

    def finish(self, until_idle: float = 5.0) -> None:
        """Stop gracefully, then catch up with a fresh process until idle."""
        if self.proc.poll() is not None:
            self.crashes += 1
        else:
            self.proc.send_signal(signal.SIGTERM)
            if self.proc.wait(timeout=120) != 0:
                self.crashes += 1
        catch_up = self._start("--until-idle", str(until_idle))
        if catch_up.wait(timeout=600) != 0:
            self.crashes += 1
