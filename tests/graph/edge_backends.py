"""Which edge-store backends the contract suite runs against, and why any is skipped."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import mongomock
import pymongo

from graph.model.edges import EdgeStore
from graph.stores.mongo import MongoEdgeStore
from graph.stores.sqlite import SqliteEdgeStore
from tests.mongomock_compat import patch_mongomock

MONGO_URL = os.environ.get("FANOUT_TEST_MONGO_URL")


def docker_available() -> bool:
    return shutil.which("docker") is not None and (
        os.path.exists("/var/run/docker.sock") or "DOCKER_HOST" in os.environ
    )


def real_mongo_skip_reason() -> str | None:
    if MONGO_URL or docker_available():
        return None
    return "real MongoDB: FANOUT_TEST_MONGO_URL is not set and no Docker engine is available"


@contextmanager
def _sqlite(tmp: Path) -> Iterator[EdgeStore]:
    store = SqliteEdgeStore(tmp / f"{uuid.uuid4().hex}.db")
    yield store
    store.close()


@contextmanager
def _mongomock(mode: Any) -> Iterator[EdgeStore]:
    patch_mongomock()
    yield MongoEdgeStore(mongomock.MongoClient().db, mode)


@contextmanager
def _real_mongo(mode: Any) -> Iterator[EdgeStore]:
    if MONGO_URL:
        client: pymongo.MongoClient[Any] = pymongo.MongoClient(MONGO_URL)
        name = f"fanout_test_{uuid.uuid4().hex[:8]}"
        yield MongoEdgeStore(client[name], mode)
        client.drop_database(name)
        client.close()
        return
    from testcontainers.mongodb import MongoDbContainer

    with MongoDbContainer("mongo:7") as container:
        client = pymongo.MongoClient(container.get_connection_url())
        yield MongoEdgeStore(client["fanout_test"], mode)
        client.close()


BACKENDS: dict[str, Callable[[Path], Any]] = {
    "sqlite": _sqlite,
    "mongomock-collection": lambda _tmp: _mongomock("collection"),
    "mongomock-index": lambda _tmp: _mongomock("index"),
    "mongodb-collection": lambda _tmp: _real_mongo("collection"),
    "mongodb-index": lambda _tmp: _real_mongo("index"),
}
