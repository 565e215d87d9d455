"""What a failure at the edge-store or cache boundary means for the batch that met it.

The consume loop needs one answer per exception, and only the drivers know it:

- ``TRANSIENT``: the service is busy, restarting or unreachable. Retrying the same batch later
  will succeed without anyone doing anything (SQLite busy/locked, a disk I/O hiccup, a MongoDB
  election or network error, a memcached server that does not answer).
- ``PERMANENT``: retrying cannot help until an operator acts (a missing table, a read-only or
  corrupt database file, bad credentials, a malformed URL). The consumer must stop loudly and
  commit nothing, rather than retry forever in silence.
- ``POISON``: not a store or cache failure at all, so the event being applied is the suspect
  (the loop isolates it and may dead-letter it).

Invariant: an exception raised by the edge store or the cache is never ``POISON``. Every event
is valid by the time it reaches the store (ids, sizes and types are checked at decode), so a
store error says something about the store, and dead-lettering the event would lose it.
"""

from __future__ import annotations

import enum
import sqlite3

from pymongo import errors as mongo

from timeline_fanout.graph.lists.token_lists import ListWriteError
from timeline_fanout.graph.timelines.post_bodies import BodyWriteError
from timeline_fanout.memcache import CacheUnavailable


class Failure(enum.Enum):
    TRANSIENT = "transient"
    PERMANENT = "permanent"
    POISON = "poison"


# SQLite primary result codes (https://sqlite.org/rescode.html); extended codes carry the
# primary one in their low byte.
_SQLITE_TRANSIENT = {
    5,  # SQLITE_BUSY: another connection holds the lock
    6,  # SQLITE_LOCKED: a conflict inside this connection's shared cache
    10,  # SQLITE_IOERR: the OS failed a read or write; the next attempt may not
    13,  # SQLITE_FULL: the disk is full; freeing space fixes it without a restart
    15,  # SQLITE_PROTOCOL: a WAL locking race
}
_SQLITE_TRANSIENT_TEXT = ("database is locked", "is busy", "disk i/o error", "database or disk")

# MongoDB server error codes that a retry outlives (elections, shutdowns, timeouts, conflicts).
_MONGO_TRANSIENT_CODES = {
    6,  # HostUnreachable
    7,  # HostNotFound
    24,  # LockTimeout
    46,  # LockBusy
    50,  # MaxTimeMSExpired
    64,  # WriteConcernFailed
    89,  # NetworkTimeout
    91,  # ShutdownInProgress
    112,  # WriteConflict
    117,  # ConflictingOperationInProgress
    133,  # FailedToSatisfyReadPreference
    189,  # PrimarySteppedDown
    262,  # ExceededTimeLimit
    9001,  # SocketException
    10107,  # NotWritablePrimary
    11600,  # InterruptedAtShutdown
    11602,  # InterruptedDueToReplStateChange
    13435,  # NotPrimaryNoSecondaryOk
    13436,  # NotPrimaryOrSecondary
    16500,  # request rate too large (Cosmos DB's MongoDB API)
}
_MONGO_TRANSIENT_LABELS = ("RetryableWriteError", "TransientTransactionError")


def classify(exc: BaseException) -> Failure:
    """The meaning of ``exc`` for the batch being applied (see the module docstring)."""
    if isinstance(exc, CacheUnavailable | ListWriteError | BodyWriteError):
        return Failure.TRANSIENT
    if isinstance(exc, sqlite3.Error):
        return _sqlite(exc)
    if isinstance(exc, mongo.PyMongoError):
        return _mongo(exc)
    if isinstance(exc, ConnectionError | TimeoutError):  # a raw socket error from a driver
        return Failure.TRANSIENT
    return Failure.POISON


def is_transient(exc: BaseException) -> bool:
    return classify(exc) is Failure.TRANSIENT


def _sqlite(exc: sqlite3.Error) -> Failure:
    """Only an ``OperationalError`` can be transient; everything else SQLite raises (corrupt or
    foreign file, misuse, constraint violations the schema should have prevented) needs a
    person."""
    if not isinstance(exc, sqlite3.OperationalError):
        return Failure.PERMANENT
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return Failure.TRANSIENT if code & 0xFF in _SQLITE_TRANSIENT else Failure.PERMANENT
    text = str(exc).lower()  # raised without a code (by Python's own checks)
    if any(marker in text for marker in _SQLITE_TRANSIENT_TEXT):
        return Failure.TRANSIENT
    return Failure.PERMANENT


def _mongo(exc: mongo.PyMongoError) -> Failure:
    # ConnectionFailure covers AutoReconnect, NetworkTimeout, NotPrimaryError and server
    # selection timeouts; ConfigurationError and InvalidURI are not connection failures.
    if isinstance(exc, mongo.ConnectionFailure):
        return Failure.TRANSIENT
    if any(exc.has_error_label(label) for label in _MONGO_TRANSIENT_LABELS):
        return Failure.TRANSIENT
    if isinstance(exc, mongo.BulkWriteError):
        # Duplicate keys are handled by the store itself; what reaches here is decided by the
        # write errors' codes: transient only if every one of them is.
        codes = {e.get("code") for e in exc.details.get("writeErrors", [])}
        concern = exc.details.get("writeConcernErrors", [])
        codes |= {e.get("code") for e in concern}
        if codes and codes <= _MONGO_TRANSIENT_CODES:
            return Failure.TRANSIENT
        return Failure.PERMANENT
    if isinstance(exc, mongo.OperationFailure):
        # 13 Unauthorized and 18 AuthenticationFailed, like every code not listed, need a person.
        return Failure.TRANSIENT if exc.code in _MONGO_TRANSIENT_CODES else Failure.PERMANENT
    return Failure.PERMANENT  # ConfigurationError, InvalidURI, InvalidName, ...
