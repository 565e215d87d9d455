"""The store/cache failure classifier against errors the real drivers raise here: SQLite files
that are locked, read-only, corrupt or missing a table; memcached and MongoDB not answering."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from pymongo import MongoClient
from pymongo import errors as mongo

from tests.conftest import Refused
from timeline_fanout.graph import EdgeChange
from timeline_fanout.graph.failures import Failure, classify, is_transient
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore
from timeline_fanout.memcache import MemcacheCluster


def raised(action: object) -> BaseException:
    assert callable(action)
    with pytest.raises(Exception) as info:
        action()
    return info.value


def test_a_locked_sqlite_database_is_transient(tmp_path: Path) -> None:
    path = tmp_path / "edges.db"
    SqliteEdgeStore(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    waiter = sqlite3.connect(path, timeout=0)
    exc = raised(lambda: waiter.execute("INSERT INTO users VALUES ('u1', 0)"))
    holder.rollback()
    assert "locked" in str(exc)
    assert classify(exc) is Failure.TRANSIENT


def test_a_dropped_table_is_permanent(tmp_path: Path) -> None:
    store = SqliteEdgeStore(tmp_path / "edges.db")
    sqlite3.connect(tmp_path / "edges.db", isolation_level=None).execute("DROP TABLE edges")
    exc = raised(lambda: store.apply([EdgeChange("a", "b", True, 1)]))
    assert "no such table" in str(exc)
    assert classify(exc) is Failure.PERMANENT


def test_a_read_only_database_is_permanent(tmp_path: Path) -> None:
    path = tmp_path / "edges.db"
    SqliteEdgeStore(path).close()
    # Root ignores file modes, so the file is opened read-only the way a read-only mount would.
    readonly = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    exc = raised(lambda: readonly.execute("INSERT INTO users VALUES ('u1', 0)"))
    assert "readonly" in str(exc)
    assert classify(exc) is Failure.PERMANENT


def test_a_corrupt_or_unopenable_file_is_permanent(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"not a database, " * 512)
    exc = raised(lambda: SqliteEdgeStore(corrupt))
    assert "not a database" in str(exc)
    assert classify(exc) is Failure.PERMANENT
    (tmp_path / "dir.db").mkdir()
    exc = raised(lambda: sqlite3.connect(tmp_path / "dir.db").execute("SELECT 1 FROM users"))
    assert classify(exc) is Failure.PERMANENT


def test_memcached_not_answering_is_transient(refused: Refused) -> None:
    cluster = MemcacheCluster([refused.pair])
    exc = raised(lambda: cluster.flush_all())
    assert is_transient(exc)
    cluster.close()


def test_mongodb_errors_by_kind_code_and_label(refused: Refused) -> None:
    client: MongoClient[dict[str, object]] = MongoClient(
        f"mongodb://{refused}/", serverSelectionTimeoutMS=200
    )
    unreachable = raised(lambda: client.admin.command("ping"))
    client.close()
    assert isinstance(unreachable, mongo.ServerSelectionTimeoutError)
    assert classify(unreachable) is Failure.TRANSIENT
    assert classify(mongo.NotPrimaryError("not primary")) is Failure.TRANSIENT
    assert classify(mongo.NetworkTimeout("timed out")) is Failure.TRANSIENT
    assert classify(mongo.OperationFailure("Authentication failed", code=18)) is Failure.PERMANENT
    assert classify(mongo.OperationFailure("not authorized", code=13)) is Failure.PERMANENT
    assert classify(mongo.OperationFailure("stepped down", code=189)) is Failure.TRANSIENT
    labelled = mongo.OperationFailure("x", code=1, details={"errorLabels": ["RetryableWriteError"]})
    assert classify(labelled) is Failure.TRANSIENT
    conflict = mongo.BulkWriteError({"writeErrors": [{"code": 112}], "writeConcernErrors": []})
    assert classify(conflict) is Failure.TRANSIENT
    invalid = mongo.BulkWriteError({"writeErrors": [{"code": 2}], "writeConcernErrors": []})
    assert classify(invalid) is Failure.PERMANENT
    assert classify(mongo.ConfigurationError("bad option")) is Failure.PERMANENT


def test_anything_else_makes_the_event_the_suspect() -> None:
    assert classify(KeyError("u1")) is Failure.POISON
    assert classify(ValueError("bad")) is Failure.POISON
