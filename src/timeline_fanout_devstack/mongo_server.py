"""The local Mongo-wire-protocol server: FerretDB (SQLite backend) embedded in tools/ferretdb.

``fanout stack up --edge-store mongodb`` and the test session run it on loopback so that the Mongo
edge store is exercised through pymongo against a real server. FerretDB is not MongoDB: what a run
on it proves, and the deviations found, are in docs/edge-store.md; the product is written for
MongoDB and never bent to FerretDB.

The binary is built by ``.ci/build-ferretdb`` into a cache keyed by the hash of the program's
sources, so editing tools/ferretdb makes a new path (never a stale binary); this module computes
the same path. ``FANOUT_FERRETDB_BIN`` names another binary.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.errors import PyMongoError

TOOL_DIR = Path(__file__).resolve().parents[2] / "tools" / "ferretdb"
TOOL_SOURCES = ("go.mod", "go.sum", "main.go")
DEFAULT_DATABASE = "fanout"


class MongoServerError(RuntimeError):
    pass


def tools_cache() -> Path:
    """Where .ci/build-ferretdb puts its builds (the same expression as the script's)."""
    if explicit := os.environ.get("FANOUT_TOOLS_CACHE"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "timeline-fanout"


def ferretdb_binary() -> Path:
    """The FerretDB server built from this checkout's tools/ferretdb."""
    if explicit := os.environ.get("FANOUT_FERRETDB_BIN"):
        return Path(explicit)
    try:
        sources = b"".join((TOOL_DIR / name).read_bytes() for name in TOOL_SOURCES)
    except FileNotFoundError as exc:
        raise MongoServerError(
            f"tools/ferretdb is not in this installation ({exc.filename}): "
            "set FANOUT_FERRETDB_BIN to a FerretDB server binary"
        ) from exc
    key = hashlib.sha256(sources).hexdigest()[:16]
    path = tools_cache() / f"ferretdb-{key}" / "ferretdb"
    if not os.access(path, os.X_OK):
        raise MongoServerError(f"FerretDB is not built ({path}): run `bash .ci/build-ferretdb`")
    return path


def ferretdb_argv(port: int, data_dir: Path) -> list[str]:
    return [str(ferretdb_binary()), "-listen", f"127.0.0.1:{port}", "-data-dir", str(data_dir)]


def ferretdb_version() -> str:
    """What the built binary reports, e.g. ``FerretDB v1.24.2``."""
    done = subprocess.run(
        [str(ferretdb_binary()), "-version"], capture_output=True, text=True, check=True, timeout=30
    )
    return done.stdout.strip()


def database_url(address: str, database: str = DEFAULT_DATABASE) -> str:
    return f"mongodb://{address}/{database}"


@dataclass(frozen=True, slots=True)
class ServerIdentity:
    """Which Mongo-protocol server answers at a URL: ``FerretDB v1.24.2`` or ``MongoDB 7.0.14``."""

    product: str
    version: str

    @property
    def is_ferretdb(self) -> bool:
        return self.product == "FerretDB"

    def __str__(self) -> str:
        return f"{self.product} {self.version}"


def _client(url: str, timeout: float) -> MongoClient[Any]:
    ms = int(timeout * 1000)
    return MongoClient(url, serverSelectionTimeoutMS=ms, connectTimeoutMS=ms, socketTimeoutMS=ms)


def identify(url: str, timeout: float = 5.0) -> ServerIdentity:
    """Asks the server (``buildInfo``): FerretDB answers with a ``ferretdbVersion`` beside the
    MongoDB version it imitates."""
    with _client(url, timeout) as client:
        info = client.admin.command("buildInfo")
    if "ferretdbVersion" in info:
        return ServerIdentity("FerretDB", str(info["ferretdbVersion"]))
    return ServerIdentity("MongoDB", str(info["version"]))


def mongo_answers(url: str, timeout: float = 1.0) -> bool:
    try:
        with _client(url, timeout) as client:
            client.admin.command("ping")
    except PyMongoError:
        return False
    return True
