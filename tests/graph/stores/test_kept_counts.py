"""Each store's kept counts against two writer processes on one store.

Interleavings that could break a count kept beside the edges, and why none does:

- Replay over a live consumer: a restarted consumer re-applies batches another has applied,
  while that one goes on with newer ones. SQLite: a replayed write is older or equal, so its
  upsert changes nothing and no trigger fires. Mongo: the replay bumps the version and
  recounts; its count is right for the edges it saw, and a newer version's count wins.
- Two consumers writing the same edge: SQLite runs one writer transaction at a time, so the
  trigger compares the row as the previous writer left it. Mongo: each writer bumps after its
  edge writes and reads the version after its bump, so the greatest version read counts every
  edge write (graph/stores/mongo.py).
- Unfollow/refollow races: a follow and an unfollow of one edge from two processes, in either
  order: the newer position wins and the counts follow the edges that won.
- A removal racing follows: SQLite's triggers count each row the removal's UPDATE flipped, once;
  the Mongo removal recounts its user and every neighbour after switching their edges off.
- Counts created while another process writes: SQLite creates and fills the table under the
  write lock, in one transaction with its triggers; Mongo fills them by the same versioned
  recount a writer takes, so a concurrent writer's newer count wins.

Each test runs two processes (spawned, each with its own connection) released together, then
compares every user's kept counts with the counts computed from the edges.
"""

from __future__ import annotations

import multiprocessing
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pymongo
import pytest

from graph.model.edges import EdgeChange, EdgeStore
from graph.stores.mongo import MongoEdgeStore
from graph.stores.sqlite import SqliteEdgeStore
from tests.mongo_servers import MongoServer

USERS = [f"u{i}" for i in range(12)]


@dataclass(frozen=True)
class Subject:
    """A store any process can open (a picklable function of a path or a URL), and the
    batches each writer writes: fewer on FerretDB, whose SQLite backend commits each update on
    its own (some 15 ms each); the races are the same."""

    open: Callable[[], EdgeStore]
    batches: int


def _sqlite(path: str) -> EdgeStore:
    return SqliteEdgeStore(path)


def _mongo(url: str) -> EdgeStore:
    return MongoEdgeStore(pymongo.MongoClient(url).get_default_database())


@pytest.fixture(params=["sqlite", "ferretdb"])
def subject(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Subject]:
    if request.param == "sqlite":
        yield Subject(partial(_sqlite, str(tmp_path / "edges.db")), 150)
        return
    server: MongoServer = request.getfixturevalue("ferretdb")
    url = server.database_url()
    yield Subject(partial(_mongo, url), 50)
    with pymongo.MongoClient(url) as client:
        client.drop_database(client.get_default_database().name)


def _writer(subject: Subject, seed: int, barrier: Any) -> None:
    """Random follows and unfollows over a few users (so both processes hit the same edges),
    positions from a shared clock shape (either process may be newer), replays of its own
    earlier batches, and removals."""
    rng = random.Random(seed)
    store = subject.open()
    done: list[list[EdgeChange]] = []
    barrier.wait()
    for n in range(subject.batches):
        batch = []
        for _ in range(rng.randrange(1, 12)):
            a, b = rng.sample(USERS, 2)
            batch.append(EdgeChange(a, b, rng.random() < 0.55, n * 10 + rng.randrange(10)))
        store.apply(batch)
        done.append(batch)
        if rng.random() < 0.3:
            store.apply(rng.choice(done))  # a replay over the other, live, writer
        if rng.random() < 0.05:
            store.remove_user(rng.choice(USERS), n * 10 + rng.randrange(10))
    store.close()


def _race(subject: Subject) -> None:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2, timeout=60)
    workers = [context.Process(target=_writer, args=(subject, seed, barrier)) for seed in (1, 2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(300)
        assert worker.exitcode == 0


def _assert_exact(subject: Subject) -> None:
    store = subject.open()
    try:
        wrong = {u: (store.counts(u), store.recounted(u)) for u in USERS}
        wrong = {u: pair for u, pair in wrong.items() if pair[0] != pair[1]}
        assert wrong == {}
        assert sum(store.counts(u).followers for u in USERS) > 0  # the race left edges
    finally:
        store.close()


def test_two_writer_processes_leave_every_count_exact(subject: Subject) -> None:
    subject.open().close()  # the schema, before the two connections race
    _race(subject)
    _assert_exact(subject)


def _forget_counts(store: EdgeStore) -> None:
    """Back to a store written before the counts existed."""
    if isinstance(store, SqliteEdgeStore):
        for trigger in ("edges_count_insert", "edges_count_flip", "edges_count_delete"):
            store._db.execute(f"DROP TRIGGER {trigger}")
        store._db.execute("DROP TABLE edge_counts")
    else:
        assert isinstance(store, MongoEdgeStore)
        store._db.drop_collection("edge_counts")
        store._db.drop_collection("meta")


def test_a_store_without_counts_gets_them_exact_while_two_processes_write(
    subject: Subject,
) -> None:
    """A store written before the counts existed: both processes open it at once, and each
    fills the counts or finds them filled, and both write."""
    store = subject.open()
    rng = random.Random(5)
    store.apply([EdgeChange(*rng.sample(USERS, 2), rng.random() < 0.7, p) for p in range(200)])
    _forget_counts(store)
    store.close()
    _race(subject)
    _assert_exact(subject)
