"""The ring record (memcache/ring.py) kept in the edge store, the one place every process
already shares: a one-row table in SQLite, one document in MongoDB.

Each process reads it once per ring lease, from whichever thread first needs the cache after
the lease ran out, so a source here is safe from any thread: SQLite's one connection is used
under a lock, MongoDB's client is thread-safe. A swap is a compare-and-set on the whole
record, so two operators' changes cannot interleave: it answers True exactly when the stored
record was ``expected`` (None: there was none) and is now ``record``.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from timeline_fanout.memcache.ring import RingRecord

__all__ = ["MongoRingSource", "SqliteRingSource", "open_ring_source"]

_TABLE = (
    "CREATE TABLE IF NOT EXISTS ring_record ("
    "id INTEGER PRIMARY KEY CHECK (id = 1), record TEXT NOT NULL)"
)
# A ring read waits at most this long for MongoDB: a process whose read fails uses no cache
# server until a read succeeds, and its request threads wait on the read meanwhile.
MONGO_TIMEOUT_MS = 5_000


def open_ring_source(url: str) -> SqliteRingSource | MongoRingSource:
    """The ring record of the edge store at ``url`` (the forms ``open_edge_store`` takes): a
    ``RingSource`` that also closes its connection."""
    if url.startswith("sqlite:///"):
        return SqliteRingSource(url.removeprefix("sqlite:///") or ":memory:")
    if url.startswith(("mongodb://", "mongodb+srv://")):
        return MongoRingSource(url)
    raise ValueError("unsupported edge store URL (want sqlite:/// or mongodb://)")


class SqliteRingSource:
    """The record in the SQLite file at ``path`` (``:memory:``: a database private to this
    source). One connection, opened to be used from any thread and used by one at a time
    under a lock: a few calls a minute, so the lock is never contended for long."""

    def __init__(self, path: str) -> None:
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()
        self._db.execute(_TABLE)

    def read_ring(self) -> RingRecord | None:
        with self._lock:
            row = self._db.execute("SELECT record FROM ring_record WHERE id = 1").fetchone()
        return None if row is None else RingRecord.from_json(row[0])

    def swap_ring(self, expected: RingRecord | None, record: RingRecord) -> bool:
        """Under SQLite's write lock (``BEGIN IMMEDIATE``): the stored record is compared and
        replaced with no other writer in between. A refused or failed swap is rolled back, so
        the connection is left outside any transaction."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute("SELECT record FROM ring_record WHERE id = 1").fetchone()
                if (None if row is None else RingRecord.from_json(row[0])) != expected:
                    return False
                self._db.execute(
                    "INSERT INTO ring_record (id, record) VALUES (1, ?) "
                    "ON CONFLICT (id) DO UPDATE SET record = excluded.record",
                    (record.to_json(),),
                )
                self._db.execute("COMMIT")
                return True
            finally:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")

    def close(self) -> None:
        self._db.close()


class MongoRingSource:
    """The record in the ``ring`` collection (document ``_id: "ring"``) of the URL's
    database. The compare-and-set is a filter on the stored text (always ``to_json()`` of a
    record, so equal records have equal text), which every MongoDB server applies atomically
    to one document; an insert of a first record races on the unique ``_id``.

    Whatever the URL asks for, the record is read from the primary with a linearizable read
    concern (a secondary may not hold the newest swap yet, and a primary cut off by a partition
    may still answer from before it; a process must read the newest record within its lease)
    and written with ``w: "majority"``: an unacknowledged write reports no refusal, and the
    operator's change waits on a swap only once no failover can roll it back."""

    def __init__(self, url: str) -> None:
        from pymongo import MongoClient, ReadPreference, WriteConcern
        from pymongo.read_concern import ReadConcern

        options: dict[str, Any] = {
            "appname": "timeline-fanout-ring",
            "serverSelectionTimeoutMS": MONGO_TIMEOUT_MS,
        }
        if "sockettimeoutms=" not in urlsplit(url).query.lower():
            options["socketTimeoutMS"] = MONGO_TIMEOUT_MS
        self._client: MongoClient[Any] = MongoClient(url, **options)
        self._ring = self._client.get_default_database(default="fanout").get_collection(
            "ring",
            read_preference=ReadPreference.PRIMARY,
            write_concern=WriteConcern("majority"),
            read_concern=ReadConcern("linearizable"),
        )

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
        # Matched, not modified: a swap to the record already stored changes no byte.
        return done.matched_count == 1

    def close(self) -> None:
        self._client.close()
