"""The SQLite store's kept counts against two writer processes on one file.

Interleavings that could break a count kept beside the edges, and why none does here:

- Replay over a live consumer: a restarted consumer re-applies batches another has applied,
  while that one goes on with newer ones. A replayed write is older or equal, so its upsert
  changes nothing and no trigger fires; counts move only on a flip of ``active``.
- Two consumers writing the same edge: each write is one IMMEDIATE transaction, and SQLite
  runs one writer at a time, so the trigger compares the row as the previous writer left it.
- Unfollow/refollow races: a follow and an unfollow of one edge from two processes, in either
  order: the newer position wins, and the count moves once per change of state that happened,
  never for the one that lost.
- A removal racing follows: the removal's UPDATE flips rows in its own transaction, and the
  triggers count each row it flipped, once.
- The table created while another process writes: created and filled under the write lock, in
  one transaction with its triggers, so no edge changes between the fill and the first trigger.

Each test runs two processes (spawned, each with its own connection) released together, then
compares every user's kept counts with the counts computed from the edges.
"""

from __future__ import annotations

import multiprocessing
import random
from pathlib import Path
from typing import Any

from timeline_fanout.graph.model.edges import EdgeChange
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore

USERS = [f"u{i}" for i in range(12)]
BATCHES = 150


def _writer(path: str, seed: int, barrier: Any) -> None:
    """Random follows and unfollows over a few users (so both processes hit the same edges),
    positions from a shared clock shape (either process may be newer), replays of its own
    earlier batches, and removals."""
    rng = random.Random(seed)
    store = SqliteEdgeStore(path)
    done: list[list[EdgeChange]] = []
    barrier.wait()
    for n in range(BATCHES):
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


def _race(path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2, timeout=60)
    workers = [context.Process(target=_writer, args=(str(path), seed, barrier)) for seed in (1, 2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0


def _assert_exact(path: Path) -> None:
    store = SqliteEdgeStore(path)
    try:
        wrong = {u: (store.counts(u), store.recounted(u)) for u in USERS}
        wrong = {u: pair for u, pair in wrong.items() if pair[0] != pair[1]}
        assert wrong == {}
        assert sum(store.counts(u).followers for u in USERS) > 0  # the race left edges
    finally:
        store.close()


def test_two_writer_processes_leave_every_count_exact(tmp_path: Path) -> None:
    path = tmp_path / "edges.db"
    SqliteEdgeStore(path).close()  # the schema, before the two connections race
    _race(path)
    _assert_exact(path)


def test_a_file_without_counts_gets_them_exact_while_two_processes_write(tmp_path: Path) -> None:
    """A file written before the counts existed: both processes open it at once, one creates
    and fills the table, the other finds it made, and both write."""
    path = tmp_path / "edges.db"
    store = SqliteEdgeStore(path)
    rng = random.Random(5)
    store.apply([EdgeChange(*rng.sample(USERS, 2), rng.random() < 0.7, p) for p in range(200)])
    for trigger in ("edges_count_insert", "edges_count_flip", "edges_count_delete"):
        store._db.execute(f"DROP TRIGGER {trigger}")
    store._db.execute("DROP TABLE edge_counts")
    store.close()
    _race(path)
    _assert_exact(path)
