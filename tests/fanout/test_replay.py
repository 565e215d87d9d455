"""`fanout replay`: rebuilds from the log, changes nothing over live state, starts at a time."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime
from pathlib import Path

from consumers.replay import FromTime, resolve
from fanout import wiring
from fanout.settings import Settings
from graph import ListKind, ListRef
from tests.conftest import run_cli

USERS = [f"u{i}" for i in range(25)]


def snapshot(settings: Settings) -> dict[str, object]:
    store = wiring.edge_store(settings)
    lists = wiring.list_store(settings, store)
    reader = wiring.timeline_reader(settings, store)
    refs = [ListRef(kind, u) for u in USERS for kind in (ListKind.FOLLOWERS, ListKind.FOLLOWING)]
    state: dict[str, object] = {f"{r.kind.value}:{r.user}": lists.read(r) for r in refs}
    state.update({f"tl:{u}": reader.read(u, limit=1000) for u in USERS})
    state["edges"] = {u: store.followers(u) for u in USERS}
    return state


def ok(settings: Settings, *args: str) -> str:
    done = run_cli(settings, *args)
    assert done.returncode == 0, done.stderr.decode()
    return done.stderr.decode()


def test_replay_rebuilds_an_empty_store_and_cache_and_changes_nothing_over_live_state(
    settings: Settings, tmp_path: Path
) -> None:
    rng = random.Random(4)
    with wiring.publisher(settings) as publisher:
        for _ in range(300):
            a, b = rng.sample(USERS, 2)
            kind = "follow" if rng.random() < 0.7 else "unfollow"
            publisher.publish({"type": kind, "follower": a, "followee": b})
    ok(settings, "consume", "graph", "--until-idle", "3")
    with wiring.publisher(settings) as publisher:
        for i in range(40):
            publisher.publish({"type": "post", "author": rng.choice(USERS), "post_id": f"p{i}"})
    ok(settings, "consume", "fanout", "--until-idle", "3")
    live = snapshot(settings)
    assert any(live[f"tl:{u}"] for u in USERS)

    ok(settings, "replay", "graph", "--from-beginning", "--until-idle", "3")
    ok(settings, "replay", "fanout", "--until-idle", "3")
    assert snapshot(settings) == live  # over live state: nothing changed

    fresh = settings.model_copy(update={"edge_store": f"sqlite:///{tmp_path / 'empty.db'}"})
    wiring.list_store(fresh, wiring.edge_store(fresh)).cache.flush_all()
    summary = ok(fresh, "replay", "graph", "--until-idle", "3")
    assert "replayed 300 events" in summary
    ok(fresh, "replay", "fanout", "--until-idle", "3")
    assert snapshot(fresh) == live  # into an empty store and cache: rebuilt exactly


def test_replay_from_time_starts_at_the_first_event_at_or_after_it(settings: Settings) -> None:
    with wiring.publisher(settings) as publisher:
        for i in range(30):
            publisher.publish({"type": "follow", "follower": f"early{i}", "followee": f"e{i % 4}"})
    time.sleep(0.3)
    moment = datetime.now(UTC)
    time.sleep(0.3)
    with wiring.publisher(settings) as publisher:
        for i in range(20):
            publisher.publish({"type": "follow", "follower": f"late{i}", "followee": f"e{i % 4}"})

    starts = resolve(
        settings.kafka, settings.topics.graph, FromTime(int(moment.timestamp() * 1000))
    )
    assert sum(s.offset for s in starts) == 30  # exactly the early events are skipped
    ok(settings, "replay", "graph", "--from-time", moment.isoformat(), "--until-idle", "3")
    store = wiring.edge_store(settings)
    followers = [f for i in range(4) for f in store.followers(f"e{i}")]
    assert sorted(followers) == sorted(f"late{i}" for i in range(20))
