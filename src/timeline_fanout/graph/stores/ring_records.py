"""The ring record (memcache/ring.py) kept in the edge store, the one place every process
already shares: a one-row table in SQLite, one document in MongoDB.

Each process reads it once per ring lease, from whichever thread first needs the cache after
the lease ran out, so a source here is safe from any thread: SQLite opens a connection per
call (a handful of calls a minute), MongoDB shares its thread-safe client. A swap is a
compare-and-set on the whole record, so two operators' changes cannot interleave.
"""

from __future__ import annotations

import sqlite3
from typing import Any
from urllib.parse import urlsplit

from timeline_fanout.memcache.ring import RingRecord, RingSource

__all__ = ["MongoRingSource", "SqliteRingSource", "open_ring_source"]

_TABLE = (
    "CREATE TABLE IF NOT EXISTS ring_record ("
    "id INTEGER PRIMARY KEY CHECK (id = 1), record TEXT NOT NULL)"
)
# A ring read waits at most this long for MongoDB: a process whose read fails uses no cache
# server until a read succeeds, and its request threads wait on the read meanwhile.
MONGO_TIMEOUT_MS = 5_000


def open_ring_source(url: str) -> RingSource:
    """The ring record of the edge store at ``url`` (the forms ``open_edge_store`` takes)."""
    if url.startswith("sqlite:///"):
        return SqliteRingSource(url.removeprefix("sqlite:///") or ":memory:")
    if url.startswith(("mongodb://", "mongodb+srv://")):
        return MongoRingSource(url)
    raise ValueError("unsupported edge store URL (want sqlite:/// or mongodb://)")


class SqliteRingSource:
    """The record in the SQLite file at ``path``; a connection per call."""

    def __init__(self, path: str) -> None:
        self._path = path

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self._path, timeout=30, isolation_level=None)
        db.execute(_TABLE)
        return db

    def read_ring(self) -> RingRecord | None:
        db = self._connect()
        try:
            row = db.execute("SELECT record FROM ring_record WHERE id = 1").fetchone()
        finally:
            db.close()
        return None if row is None else RingRecord.from_json(row[0])

    def swap_ring(self, expected: RingRecord | None, record: RingRecord) -> bool:
        """Under SQLite's write lock (``BEGIN IMMEDIATE``): the stored record is compared and
        replaced with no other writer in between."""
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute("SELECT record FROM ring_record WHERE id = 1").fetchone()
            stored = None if row is None else RingRecord.from_json(row[0])
            if stored != expected:
                db.execute("ROLLBACK")
                return False
            db.execute(
                "INSERT INTO ring_record (id, record) VALUES (1, ?) "
                "ON CONFLICT (id) DO UPDATE SET record = excluded.record",
                (record.to_json(),),
            )
            db.execute("COMMIT")
            return True
        finally:
            db.close()


class MongoRingSource:
    """The record in the ``ring`` collection (document ``_id: "ring"``) of the URL's
    database. The compare-and-set is a filter on the stored text, which every MongoDB server
    applies atomically to one document; an insert of a first record races on the unique
    ``_id``."""

    def __init__(self, url: str) -> None:
        from pymongo import MongoClient

        options: dict[str, Any] = {
            "appname": "timeline-fanout-ring",
            "serverSelectionTimeoutMS": MONGO_TIMEOUT_MS,
        }
        if "sockettimeoutms=" not in urlsplit(url).query.lower():
            options["socketTimeoutMS"] = MONGO_TIMEOUT_MS
        client: MongoClient[Any] = MongoClient(url, **options)
        self._ring = client.get_default_database(default="fanout")["ring"]

    def read_ring(self) -> RingRecord | None:
        found = self._ring.find_one({"_id": "ring"})
        return None if found is None else RingRecord.from_json(str(found["record"]))

    def swap_ring(self, expected: RingRecord | None, record: RingRecord) -> bool:
        from pymongo.errors import DuplicateKeyError

        if expected is None:
            try:
                self._ring.insert_one({"_id": "ring", "record": record.to_json()})
            except DuplicateKeyError:
                return False
            return True
        done = self._ring.update_one(
            {"_id": "ring", "record": expected.to_json()}, {"$set": {"record": record.to_json()}}
        )
        return done.modified_count == 1
