"""The embedded edge store: one SQLite file, same contract as MongoDB.

``edges`` is clustered on (followee, follower) so "followers of X" reads one contiguous range of
the primary key (SQLite's covered query); the (follower, active, followee) index serves
"following of X" the same way, and a partial index of the active edges by (followee, follower)
serves a page of followers past a cursor without stepping over unfollowed edges. WAL mode lets
several consumer processes share the file.

A batch's edge writes go in primary-key order, in a page cache of ``CACHE_KIB``: a batch of
random follows on a store of millions of edges otherwise dirties and re-reads a B-tree page per
edge and index, and SQLite's default cache (2 MiB) spills those pages to the WAL before the
commit and reads them back. Order changes nothing else: ``prepare`` leaves one change per edge,
and each edge's write is decided by its own stored position.

``edge_counts`` holds each user's active follower and following counts, kept by triggers on
``edges``: an insert of an active edge adds one to both ends, an update that flips ``active``
adds or takes one, so a count changes in the same transaction as the edge whose state changed
and only when it changed (a replay or a stale write flips nothing). SQLite runs one writer at a
time, so concurrent consumers cannot interleave inside that transaction: the counts are exact
whatever the writers' order (tests/graph/stores/test_sqlite_counts.py runs two processes against one
file). A file written before the table existed gets it, filled from ``edges``, in the one
transaction that creates it.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from timeline_fanout.graph.model.edges import (
    EdgeChange,
    EdgeCounts,
    EdgeState,
    PostKey,
    PostRecord,
    PostRef,
    RemovedUser,
    Snapshot,
    StoredBodies,
    known,
    newest_first,
    prepare,
)
from timeline_fanout.graph.model.keys import ListKind, ListRef
from timeline_fanout.graph.stores.queries import StoreQueries

SCHEMA = """
CREATE TABLE IF NOT EXISTS edges (
    followee TEXT NOT NULL,
    follower TEXT NOT NULL,
    active INTEGER NOT NULL,
    pos INTEGER NOT NULL,
    grp TEXT,
    PRIMARY KEY (followee, follower)
) WITHOUT ROWID;
DROP INDEX IF EXISTS edges_following;
CREATE INDEX IF NOT EXISTS edges_following_at ON edges (follower, active, followee, grp, pos);
CREATE INDEX IF NOT EXISTS edges_active_followers ON edges (followee, follower) WHERE active = 1;
CREATE TABLE IF NOT EXISTS users (
    id TEXT PRIMARY KEY,
    removed INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS posts (
    author TEXT NOT NULL,
    post_id TEXT NOT NULL,
    ts INTEGER NOT NULL,
    text TEXT,
    PRIMARY KEY (author, post_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS posts_recent ON posts (author, ts);
CREATE TABLE IF NOT EXISTS deleted_posts (
    author TEXT NOT NULL,
    post_id TEXT NOT NULL,
    ts INTEGER,
    PRIMARY KEY (author, post_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS celebrities (id TEXT PRIMARY KEY) WITHOUT ROWID;
"""

# Created together, in one IMMEDIATE transaction, the first time a file is opened without them
# (``_ensure_counts``): the last statement fills the counts from the edges already there.
COUNTS = (
    """CREATE TABLE edge_counts (
        id TEXT PRIMARY KEY,
        followers INTEGER NOT NULL,
        following INTEGER NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TRIGGER edges_count_insert AFTER INSERT ON edges WHEN NEW.active = 1 BEGIN
        INSERT INTO edge_counts VALUES (NEW.followee, 1, 0)
            ON CONFLICT (id) DO UPDATE SET followers = followers + 1;
        INSERT INTO edge_counts VALUES (NEW.follower, 0, 1)
            ON CONFLICT (id) DO UPDATE SET following = following + 1;
    END""",
    """CREATE TRIGGER edges_count_flip AFTER UPDATE OF active ON edges
    WHEN NEW.active != OLD.active BEGIN
        INSERT INTO edge_counts VALUES (NEW.followee, NEW.active - OLD.active, 0)
            ON CONFLICT (id) DO UPDATE SET followers = followers + excluded.followers;
        INSERT INTO edge_counts VALUES (NEW.follower, 0, NEW.active - OLD.active)
            ON CONFLICT (id) DO UPDATE SET following = following + excluded.following;
    END""",
    """CREATE TRIGGER edges_count_delete AFTER DELETE ON edges WHEN OLD.active = 1 BEGIN
        UPDATE edge_counts SET followers = followers - 1 WHERE id = OLD.followee;
        UPDATE edge_counts SET following = following - 1 WHERE id = OLD.follower;
    END""",
    """INSERT INTO edge_counts (id, followers, following)
    SELECT id, sum(followers), sum(following) FROM (
        SELECT followee AS id, count(*) AS followers, 0 AS following
        FROM edges WHERE active = 1 GROUP BY followee
        UNION ALL
        SELECT follower, 0, count(*) FROM edges WHERE active = 1 GROUP BY follower
    ) GROUP BY id""",
)

T = TypeVar("T")

# The page cache of each connection, an upper bound it fills as it reads (PRAGMA cache_size):
# on a store of 1.8M edges (300 MB) it took the graph consumer's SQLite CPU an event from 95-100
# to 64-70 us with the batch in key order (docs/capacity.md, "Where the factor of ten goes").
CACHE_KIB = 64 * 1024

UPSERT = """
INSERT INTO edges (followee, follower, active, pos, grp) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (followee, follower) DO UPDATE
SET active = excluded.active, pos = excluded.pos, grp = excluded.grp
WHERE excluded.pos > edges.pos
"""


class SqliteEdgeStore(StoreQueries):
    counts_kept = True  # edge_counts, kept by triggers (module docstring)

    def __init__(self, path: str | Path) -> None:
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), timeout=30, isolation_level=None)
        self._enable_wal()
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        self._db.executescript(SCHEMA)
        self._ensure_counts()

    def _enable_wal(self) -> None:
        """Switching to WAL takes an exclusive lock without waiting on the busy handler, so two
        processes opening a new file at once can see "database is locked": retry briefly."""
        deadline = time.monotonic() + 30
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _ensure_counts(self) -> None:
        """The counts table and its triggers, created and filled atomically: under the write
        lock no edge can change between the fill and the first trigger, and a second process
        opening the file at the same time finds them made."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            made = self._db.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'edge_counts'"
            ).fetchone()
            if made is None:
                for statement in COUNTS:
                    self._db.execute(statement)

    def _removed(self, users: set[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        for chunk in _chunks(sorted(users)):
            marks = ",".join("?" * len(chunk))
            found.update(
                self._db.execute(f"SELECT id, removed FROM users WHERE id IN ({marks})", chunk)
            )
        return found

    def apply(self, changes: Sequence[EdgeChange]) -> list[EdgeChange]:
        """One IMMEDIATE transaction: the removal check and the writes see the same state, so
        a removal committed by another process can never slip in between them. The rows go in
        primary-key order (module docstring)."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            live = prepare(changes, self._removed)
            self._db.executemany(
                UPSERT,
                sorted((c.followee, c.follower, int(c.active), c.pos, c.group) for c in live),
            )
        return live

    def positions(self, edges: Sequence[tuple[str, str]]) -> dict[tuple[str, str], EdgeState]:
        """What each (follower, followee) edge holds now, a few hundred edges per query (a join
        on the primary key: a row-value IN would scan the table)."""
        rows = self._joined(
            "SELECT e.follower, e.followee, e.active, e.pos",
            "edges AS e ON e.followee = v.column2 AND e.follower = v.column1",
            edges,
        )
        return {(f, v): EdgeState(bool(a), p) for f, v, a, p in rows}

    def _joined(
        self, select: str, join: str, pairs: Sequence[tuple[str, str]]
    ) -> Iterator[tuple[Any, ...]]:
        """Rows of ``select`` for ``pairs`` joined on a primary key (a row-value IN would scan
        the table), a few hundred pairs per query."""
        for chunk in _chunks(pairs):
            values = ",".join(["(?,?)"] * len(chunk))
            yield from self._db.execute(
                f"{select} FROM (VALUES {values}) AS v CROSS JOIN {join}",
                [x for pair in chunk for x in pair],
            )

    def remove_user(self, user: str, pos: int) -> RemovedUser:
        """Idempotent: the neighbours are the edges this removal switched off, now or in an
        earlier attempt (inactive at exactly ``pos``), so a retry or a redelivery after the
        store step still names them all."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(
                "UPDATE edges SET active = 0, pos = ? WHERE (followee = ? OR follower = ?) "
                "AND active = 1 AND pos < ?",
                (pos, user, user, pos),
            )
            self._db.execute(
                "INSERT INTO users (id, removed) VALUES (?, ?) ON CONFLICT (id) DO UPDATE "
                "SET removed = max(removed, excluded.removed)",
                (user, pos),
            )
            followers = [
                r[0]
                for r in self._db.execute(
                    "SELECT follower FROM edges WHERE followee = ? AND active = 0 AND pos = ?",
                    (user, pos),
                )
            ]
            following = [
                r[0]
                for r in self._db.execute(
                    "SELECT followee FROM edges WHERE follower = ? AND active = 0 AND pos = ?",
                    (user, pos),
                )
            ]
        return RemovedUser(tuple(followers), tuple(following))

    def snapshot(self, ref: ListRef) -> Snapshot:
        column, other = (
            ("followee", "follower")
            if ref.kind is ListKind.FOLLOWERS
            else (
                "follower",
                "followee",
            )
        )
        rows = self._db.execute(
            f"SELECT {other}, pos FROM edges WHERE {column} = ? AND active = 1 ORDER BY {other}",
            (ref.user,),
        ).fetchall()
        return Snapshot([r[0] for r in rows], [r[1] for r in rows])

    def _page(
        self, column: str, other: str, user: str, group: str | None, after: str | None, limit: int
    ) -> list[str]:
        if limit < 1:  # SQLite reads a negative LIMIT as "no limit"
            return []
        # Active followers past the cursor come from the partial index, so a page never steps
        # over unfollowed edges (the planner, without statistics, would take the primary key).
        source = "edges INDEXED BY edges_active_followers" if column == "followee" else "edges"
        if group is not None:
            source = "edges"
        sql = f"SELECT {other} FROM {source} WHERE {column} = ? AND active = 1 AND {other} > ?"
        args: list[object] = [user, after or ""]
        if group is not None:
            sql += " AND grp = ?"
            args.append(group)
        sql += f" ORDER BY {other} LIMIT ?"
        args.append(limit)
        return [r[0] for r in self._db.execute(sql, args)]

    def followers(
        self, user: str, *, group: str | None = None, after: str | None = None, limit: int = 1000
    ) -> list[str]:
        return self._page("followee", "follower", user, group, after, limit)

    def following(
        self, user: str, *, group: str | None = None, after: str | None = None, limit: int = 1000
    ) -> list[str]:
        return self._page("follower", "followee", user, group, after, limit)

    def counts(self, user: str) -> EdgeCounts:
        """One primary-key lookup in the maintained counts, whatever the lists' sizes."""
        row = self._db.execute(
            "SELECT followers, following FROM edge_counts WHERE id = ?", (user,)
        ).fetchone()
        return EdgeCounts(*row) if row else EdgeCounts(0, 0)

    def recounted(self, user: str) -> EdgeCounts:
        """The counts computed from the edges (a scan of both lists): what ``counts`` must
        equal, for tests and ``fanout verify``-style checks."""
        count = "SELECT count(*) FROM edges WHERE {} = ? AND active = 1"
        (followers,) = self._db.execute(count.format("followee"), (user,)).fetchone()
        (following,) = self._db.execute(count.format("follower"), (user,)).fetchone()
        return EdgeCounts(followers, following)

    def is_following(self, follower: str, followee: str) -> bool:
        row = self._db.execute(
            "SELECT active FROM edges WHERE followee = ? AND follower = ?", (followee, follower)
        ).fetchone()
        return bool(row and row[0])

    def users(self) -> Iterator[str]:
        yield from (
            r[0]
            for r in self._db.execute(
                "SELECT followee FROM edges UNION SELECT follower FROM edges ORDER BY 1"
            )
        )

    def known_users(self, users: Collection[str]) -> set[str]:
        """Short-circuiting EXISTS per user, each on an index prefix: active followers on the
        partial index of active edges (named: on the primary key the planner would step over
        every inactive follower first, so a user whose 30k followers all left cost 3.7 ms), the
        following index, edges', posts' and users' primary keys."""
        active: set[str] = set()
        seen: set[str] = set()
        removed: set[str] = set()
        for chunk in _chunks(sorted(users)):
            values = ",".join(["(?)"] * len(chunk))
            rows = self._db.execute(
                "SELECT v.column1,"
                " EXISTS (SELECT 1 FROM edges INDEXED BY edges_active_followers"
                " WHERE followee = v.column1 AND active = 1)"
                " OR EXISTS (SELECT 1 FROM edges WHERE follower = v.column1 AND active = 1),"
                " EXISTS (SELECT 1 FROM edges WHERE followee = v.column1)"
                " OR EXISTS (SELECT 1 FROM edges WHERE follower = v.column1)"
                " OR EXISTS (SELECT 1 FROM posts WHERE author = v.column1),"
                " EXISTS (SELECT 1 FROM users WHERE id = v.column1)"
                f" FROM (VALUES {values}) AS v",
                chunk,
            )
            for user, is_active, is_seen, is_removed in rows:
                if is_active:
                    active.add(user)
                if is_seen:
                    seen.add(user)
                if is_removed:
                    removed.add(user)
        return known(active, seen, removed)

    def store_posts(self, posts: Sequence[PostRecord]) -> dict[PostRef, PostRecord]:
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT OR IGNORE INTO posts (author, post_id, ts, text) SELECT ?1, ?2, ?3, ?4"
                " WHERE NOT EXISTS"
                " (SELECT 1 FROM deleted_posts WHERE author = ?1 AND post_id = ?2)",
                [(p.author, p.post_id, p.ts, p.text) for p in posts],
            )
        rows = self._joined(
            "SELECT p.author, p.post_id, p.ts, p.text",
            "posts AS p ON p.author = v.column1 AND p.post_id = v.column2",
            [(p.author, p.post_id) for p in posts],
        )
        return {PostRef(a, i): PostRecord(a, i, ts, text) for a, i, ts, text in rows}

    def delete_posts(self, posts: Sequence[PostRef]) -> dict[PostRef, int]:
        """The tombstone (keeping the post's time) and the row's removal in one transaction;
        ``store_posts`` inserts only where no tombstone is (same transaction), so either order
        of the two leaves the post deleted."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany(
                "INSERT OR IGNORE INTO deleted_posts (author, post_id, ts) SELECT ?1, ?2,"
                " (SELECT ts FROM posts WHERE author = ?1 AND post_id = ?2)",
                posts,
            )
            self._db.executemany("DELETE FROM posts WHERE author = ? AND post_id = ?", posts)
        rows = self._joined(
            "SELECT d.author, d.post_id, d.ts",
            "deleted_posts AS d ON d.author = v.column1 AND d.post_id = v.column2",
            list(posts),
        )
        return {PostRef(a, i): ts for a, i, ts in rows if ts is not None}

    def post_bodies(self, posts: Collection[PostRef]) -> StoredBodies:
        wanted = sorted(set(posts))
        texts = {
            PostRef(a, i): text
            for a, i, text in self._joined(
                "SELECT p.author, p.post_id, p.text",
                "posts AS p ON p.author = v.column1 AND p.post_id = v.column2",
                wanted,
            )
        }
        deleted = {
            PostRef(a, i)
            for a, i in self._joined(
                "SELECT d.author, d.post_id",
                "deleted_posts AS d ON d.author = v.column1 AND d.post_id = v.column2",
                wanted,
            )
        }
        return StoredBodies(texts, deleted)

    def recent_posts(self, authors: Collection[str], limit: int) -> list[PostRecord]:
        found: list[PostRecord] = []
        for chunk in _chunks(sorted(authors)):
            marks = ",".join("?" * len(chunk))
            rows = self._db.execute(
                f"SELECT author, post_id, ts, text FROM posts WHERE author IN ({marks}) "
                "ORDER BY ts DESC, author DESC, post_id DESC LIMIT ?",
                [*chunk, limit],
            )
            found += [PostRecord(*row) for row in rows]
        return newest_first(found, limit)

    def author_posts(
        self, author: str, limit: int, before: PostKey | None = None
    ) -> list[PostRecord]:
        if limit < 1:  # SQLite reads a negative LIMIT as "no limit"
            return []
        # A row value, so the cursor is a place in the index (author, ts), which holds the
        # primary key's post_id after ts: the page is a range, never a walk from the newest.
        sql = "SELECT author, post_id, ts, text FROM posts WHERE author = ?"
        args: list[object] = [author]
        if before is not None:
            sql += " AND (ts, post_id) < (?, ?)"
            args += [before.ts, before.post_id]
        sql += " ORDER BY ts DESC, post_id DESC LIMIT ?"
        return [PostRecord(*row) for row in self._db.execute(sql, [*args, limit])]

    def add_celebrities(self, users: Iterable[str]) -> None:
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT OR IGNORE INTO celebrities (id) VALUES (?)", [(u,) for u in users]
            )

    def celebrities(self) -> set[str]:
        return {row[0] for row in self._db.execute("SELECT id FROM celebrities")}

    def close(self) -> None:
        self._db.close()


def _chunks(items: Sequence[T], size: int = 400) -> Iterator[Sequence[T]]:
    """Slices small enough for SQLite's limit on bound parameters (two per item at most)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]
