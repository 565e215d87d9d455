"""Which edge-store backends the contract suite runs against: SQLite, FerretDB (the session's
server, tests/mongo_servers.py) in both following modes, and a real MongoDB where one is
available. Each Mongo-protocol store gets a database of its own, dropped afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.mongo_servers import MongoServer
from timeline_fanout.graph.model.edges import EdgeStore
from timeline_fanout.graph.stores.mongo import FollowingMode, MongoEdgeStore
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore


@contextmanager
def _sqlite(_request: pytest.FixtureRequest, tmp: Path) -> Iterator[EdgeStore]:
    store = SqliteEdgeStore(tmp / f"{uuid.uuid4().hex}.db")
    yield store
    store.close()


def _on_server(server_fixture: str, mode: FollowingMode) -> Backend:
    @contextmanager
    def open_store(request: pytest.FixtureRequest, _tmp: Path) -> Iterator[EdgeStore]:
        server: MongoServer = request.getfixturevalue(server_fixture)
        name = f"fanout_test_{uuid.uuid4().hex[:8]}"
        client = server.client()
        yield MongoEdgeStore(client[name], mode)
        client.drop_database(name)
        client.close()

    return open_store


Backend = Callable[[pytest.FixtureRequest, Path], AbstractContextManager[Any]]

BACKENDS: dict[str, Backend] = {
    "sqlite": _sqlite,
    "ferretdb-collection": _on_server("ferretdb", "collection"),
    "ferretdb-index": _on_server("ferretdb", "index"),
    "mongodb-collection": _on_server("real_mongodb", "collection"),
    "mongodb-index": _on_server("real_mongodb", "index"),
}
