"""Pick the edge store implementation from a URL (``sqlite:///path`` or ``mongodb://...``).

The URL can carry credentials (``mongodb://user:password@host/...``), so no error repeats it:
``redact`` keeps the scheme and the host only.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from timeline_fanout.graph.model.edges import EdgeStore
from timeline_fanout.graph.stores.mongo import FollowingMode, MongoEdgeStore
from timeline_fanout.graph.stores.sqlite import SqliteEdgeStore

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,30}")

# A store call the server never answers (a stalled server, a half-open connection) would hold a
# consumer inside its batch for good: past this, the call fails with a network timeout, which is
# a transient failure, and the batch is retried (every write is idempotent, and a write that
# lands late is one more writer: the newest position still wins). A ``socketTimeoutMS`` in the
# URL wins over it.
SOCKET_TIMEOUT_MS = 60_000


def open_edge_store(url: str, following_mode: FollowingMode = "collection") -> EdgeStore:
    if url.startswith("sqlite:///"):
        return SqliteEdgeStore(url.removeprefix("sqlite:///") or ":memory:")
    if url.startswith(("mongodb://", "mongodb+srv://")):
        from pymongo import MongoClient

        options: dict[str, Any] = {"appname": "timeline-fanout"}
        if "sockettimeoutms=" not in urlsplit(url).query.lower():
            options["socketTimeoutMS"] = SOCKET_TIMEOUT_MS
        client: MongoClient[Any] = MongoClient(url, **options)
        db = client.get_default_database(default="fanout")
        return MongoEdgeStore(db, following_mode)
    raise ValueError(f"unsupported edge store URL (want sqlite:/// or mongodb://): {redact(url)}")


def redact(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: never its user, password, path or query. Anything
    that is not plainly ``scheme://...`` is not echoed at all (``user:password@host`` parses as
    a scheme ``user``)."""
    scheme, sep, _rest = url.partition("://")
    if not sep or not _SCHEME.fullmatch(scheme):
        return "(not a scheme://host URL)"
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:  # an unparsable host or port: say nothing more
        host, port = "?", ""
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}{port}"
