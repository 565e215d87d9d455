"""Fixtures for the HTTP API: an app on the real local stack (Tansu, memcached, SQLite) through
Starlette's TestClient, tokens signed with generated keys, and a graph written to the store."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from starlette.testclient import TestClient

from timeline_fanout.api.settings import ApiSettings
from timeline_fanout.cli import wiring
from timeline_fanout.cli.api_server import app_for
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph.model.edges import EdgeChange, EdgeStore, PostRecord

SECRET = "test-secret-that-is-long-enough-for-hs256"
ClientFactory = Callable[..., Any]


@contextmanager
def api_client(settings: Settings, **api: Any) -> Iterator[TestClient]:
    api_settings = ApiSettings(**{"threads": 2, **api})
    app = app_for(settings, api_settings)
    # uvloop, as uvicorn runs it: its transports are not asyncio's classes
    with TestClient(
        app, raise_server_exceptions=False, backend_options={"use_uvloop": True}
    ) as client:
        yield client


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    """Open mode: no token key configured."""
    with api_client(settings) as found:
        yield found


@pytest.fixture
def store(settings: Settings) -> Iterator[EdgeStore]:
    opened = wiring.edge_store(settings)
    yield opened
    opened.close()


def hs256(sub: str, scope: str = "", secret: str = SECRET, **claims: Any) -> str:
    """A token valid for ten minutes, unless ``claims`` say otherwise (``exp=None``: none)."""
    body = {"sub": sub, "scope": scope, "exp": int(time.time()) + 600, **claims}
    return jwt.encode({k: v for k, v in body.items() if v is not None}, secret, algorithm="HS256")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def rsa_keys() -> tuple[rsa.RSAPrivateKey, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key, public_pem(key.public_key())


def ec_keys() -> tuple[ec.EllipticCurvePrivateKey, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    return key, public_pem(key.public_key())


def public_pem(key: rsa.RSAPublicKey | ec.EllipticCurvePublicKey) -> str:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


class Graph:
    """Edges and posts written straight to the edge store: the API's reads build lists and
    timelines from it on a cache miss, as after a memcached restart."""

    def __init__(self, store: EdgeStore) -> None:
        self.store = store
        self.pos = 0
        self.now = int(time.time() * 1000)

    def follow(self, follower: str, *followees: str) -> None:
        self.pos += 1
        self.store.apply([EdgeChange(follower, f, True, self.pos) for f in followees])

    def unfollow(self, follower: str, followee: str) -> None:
        self.pos += 1
        self.store.apply([EdgeChange(follower, followee, False, self.pos)])

    def post(self, author: str, post_id: str, ago_ms: int = 0) -> PostRecord:
        record = PostRecord(author, post_id, self.now - ago_ms, f"{post_id} by {author}")
        self.store.store_posts([record])
        return record


@pytest.fixture
def graph(store: EdgeStore) -> Graph:
    return Graph(store)
