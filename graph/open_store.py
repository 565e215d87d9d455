"""Pick the edge store implementation from a URL (``sqlite:///path`` or ``mongodb://...``)."""

from __future__ import annotations

from typing import Any

from graph.edges import EdgeStore
from graph.mongo_edges import FollowingMode, MongoEdgeStore
from graph.sqlite_edges import SqliteEdgeStore


def open_edge_store(url: str, following_mode: FollowingMode = "collection") -> EdgeStore:
    if url.startswith("sqlite:///"):
        return SqliteEdgeStore(url.removeprefix("sqlite:///") or ":memory:")
    if url.startswith(("mongodb://", "mongodb+srv://")):
        from pymongo import MongoClient

        client: MongoClient[Any] = MongoClient(url, appname="timeline-fanout")
        db = client.get_default_database(default="fanout")
        return MongoEdgeStore(db, following_mode)
    raise ValueError(f"unsupported edge store URL (want sqlite:/// or mongodb://): {url[:40]}")
