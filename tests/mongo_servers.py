"""The Mongo-protocol servers the tests run the Mongo edge store against.

- FerretDB (tools/ferretdb): one server per test session (per xdist worker, like the local
  stack), started by the stack's own code; each test gets a database of its own.
- A real MongoDB: ``FANOUT_TEST_MONGO_URL``, or one ``mongo:7`` container per session where a
  Docker engine answers and holds that image (no registry serves it here, and Debian packages
  no MongoDB server to build one from).

Tests choose their edge store with the ``edge_stores`` marker: ``@pytest.mark.edge_stores("sqlite",
"ferretdb-collection")`` runs the test once per store through the ``settings`` fixture (unmarked
tests use SQLite); ``ferretdb-*`` names the ``FANOUT_MONGO_FOLLOWING`` mode.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import pymongo
import pytest

from timeline_fanout_devstack import mongo_server, stack
from timeline_fanout_devstack.home import fanout_home

StoreKind = Literal["sqlite", "ferretdb-collection", "ferretdb-index"]
MONGO_URL = os.environ.get("FANOUT_TEST_MONGO_URL")
MONGO_IMAGE = "mongo:7"


@functools.cache
def ferretdb_skip_reason() -> str | None:
    try:
        mongo_server.ferretdb_binary()
    except mongo_server.MongoServerError as exc:
        return str(exc)
    return None


@functools.cache
def docker_skip_reason() -> str | None:
    """None when a Docker engine answers a ping (a socket file or a CLI alone is not enough)."""
    try:
        import docker

        client = docker.from_env(timeout=5)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:
        return f"no Docker engine answers ({type(exc).__name__})"
    return None


@functools.cache
def docker_image_missing(image: str) -> str | None:
    """None when the Docker engine (which answers) holds ``image``; the tests never pull."""
    import docker

    client = docker.from_env(timeout=5)
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        return f"the Docker engine holds no {image} image"
    finally:
        client.close()
    return None


def real_mongo_skip_reason() -> str | None:
    if MONGO_URL:
        return None
    reason = docker_skip_reason() or docker_image_missing(MONGO_IMAGE)
    if reason:
        return f"real MongoDB: FANOUT_TEST_MONGO_URL is not set and {reason}"
    return None


@dataclass
class MongoServer:
    """A running server at ``url`` (credentials and options included, any database);
    ``database_url`` names a database on it that no other test uses."""

    url: str
    identity: mongo_server.ServerIdentity
    pid: int | None = None  # FerretDB started by this session: it can be killed and restarted

    @property
    def address(self) -> str:
        return urlsplit(self.url).netloc.rpartition("@")[2]

    def database_url(self, name: str | None = None) -> str:
        scheme, netloc, _path, query, _ = urlsplit(self.url)
        return urlunsplit((scheme, netloc, "/" + (name or f"t{uuid.uuid4().hex[:12]}"), query, ""))

    def client(self) -> pymongo.MongoClient[Any]:
        return pymongo.MongoClient(self.url)

    def restart(self, stopped: float = 0.0) -> None:
        """SIGKILL the server and start it again on the same port and data (a crash and a
        supervisor's restart): FerretDB started by this session only."""
        assert self.pid is not None, "only a session's own FerretDB can be restarted"
        os.kill(self.pid, signal.SIGKILL)
        while stack._pid_alive(self.pid):
            time.sleep(0.01)
        time.sleep(stopped)
        port = int(self.address.rpartition(":")[2])
        svc = stack.start_ferretdb(fanout_home() / "logs", time.monotonic() + 30, port)
        self.pid = svc.pid


@pytest.fixture(scope="session")
def ferretdb() -> Iterator[MongoServer]:
    if reason := ferretdb_skip_reason():
        pytest.skip(reason)
    logs = fanout_home() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    svc = stack.start_ferretdb(logs, time.monotonic() + 30)
    url = mongo_server.database_url(svc.address)
    server = MongoServer(url, mongo_server.identify(url), svc.pid)
    yield server
    assert server.pid is not None
    with contextlib.suppress(ProcessLookupError):
        os.kill(server.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while stack._pid_alive(server.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    stack._kill(server.pid)


@pytest.fixture(scope="session")
def real_mongodb() -> Iterator[MongoServer]:
    """A real MongoDB for the session: one container, not one per test."""
    if reason := real_mongo_skip_reason():
        pytest.skip(reason)
    if MONGO_URL:
        yield MongoServer(MONGO_URL, mongo_server.identify(MONGO_URL))
        return
    from testcontainers.mongodb import MongoDbContainer

    with MongoDbContainer(MONGO_IMAGE) as container:
        # Its user lives in `admin`; each test's database is another.
        url = container.get_connection_url().rstrip("/") + "/?authSource=admin"
        yield MongoServer(url, mongo_server.identify(url))


@dataclass(frozen=True, slots=True)
class EdgeStoreChoice:
    url: str
    following: Literal["collection", "index"]


@pytest.fixture
def edge_store_choice(request: pytest.FixtureRequest, tmp_path: Path) -> EdgeStoreChoice:
    kind: StoreKind = getattr(request, "param", "sqlite")
    if kind == "sqlite":
        return EdgeStoreChoice(f"sqlite:///{tmp_path / 'edges.db'}", "collection")
    server: MongoServer = request.getfixturevalue("ferretdb")
    return EdgeStoreChoice(
        server.database_url(), "index" if kind.endswith("index") else "collection"
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "edge_stores(*kinds): run the test once per edge store (sqlite, mongodb-collection, "
        "mongodb-index), through the settings fixture",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("edge_stores")
    if marker is not None and "edge_store_choice" in metafunc.fixturenames:
        metafunc.parametrize("edge_store_choice", marker.args, indirect=True)


def ferretdb_deviation(request: pytest.FixtureRequest, reason: str, issue: str) -> None:
    """Mark the running test as a known FerretDB deviation from MongoDB (strict: it must fail)
    when its edge store is on FerretDB; on SQLite or a real MongoDB it must pass."""
    params = getattr(request.node, "callspec", None)
    chosen = params.params.values() if params is not None else ()
    if any(isinstance(p, str) and p.startswith("ferretdb") for p in chosen):
        request.applymarker(pytest.mark.xfail(reason=f"FerretDB: {reason} ({issue})", strict=True))


def report_header() -> str:
    if reason := ferretdb_skip_reason():
        ferret = f"FerretDB skipped: {reason}"
    else:
        ferret = f"{mongo_server.ferretdb_version()} (SQLite backend, one per worker)"
    reason = real_mongo_skip_reason()
    real = f"skipped: {reason}" if reason else ("FANOUT_TEST_MONGO_URL" if MONGO_URL else "Docker")
    return f"Mongo-protocol servers: {ferret}; real MongoDB: {real}"
