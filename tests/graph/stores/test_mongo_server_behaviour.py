"""What a real Mongo-protocol server answers where the Mongo store depends on it: unordered bulk
errors and their indexes, index conflicts, authentication failures, big ``$in`` queries and a
server killed or stalled mid-batch. Run on the session's FerretDB and on a real MongoDB where
available; where FerretDB departs from MongoDB's documented behaviour the test is a known deviation
(tests/mongo_servers.py), and the product stays written for MongoDB."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import pymongo
import pytest
from pymongo.errors import BulkWriteError, OperationFailure, PyMongoError

from tests.mongo_servers import MongoServer
from timeline_fanout.graph.failures import Failure, classify
from timeline_fanout.graph.model.edges import EdgeChange, EdgeState
from timeline_fanout.graph.stores.mongo import DUPLICATE_KEY, MongoEdgeStore
from timeline_fanout.graph.stores.open import SOCKET_TIMEOUT_MS, open_edge_store

SERVERS = ["ferretdb", "real_mongodb"]


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest) -> MongoServer:
    found: MongoServer = request.getfixturevalue(request.param)
    return found


@pytest.fixture
def db(server: MongoServer) -> Any:
    with server.client() as client:
        name = server.database_url().rpartition("/")[2]
        yield client[name]
        client.drop_database(name)


def deviation(server: MongoServer, request: pytest.FixtureRequest, why: str, issue: str) -> None:
    if server.identity.is_ferretdb:
        request.applymarker(pytest.mark.xfail(reason=f"FerretDB: {why} ({issue})", strict=True))


def test_unordered_inserts_report_each_duplicate_at_its_index_and_insert_the_rest(db: Any) -> None:
    db.e.create_index([("k", 1)], unique=True)
    db.e.insert_many([{"k": 1}, {"k": 3}])
    with pytest.raises(BulkWriteError) as refused:
        db.e.insert_many([{"k": k} for k in (0, 1, 2, 3, 4)], ordered=False)
    errors = refused.value.details["writeErrors"]
    assert [(e["index"], e["code"]) for e in errors] == [(1, DUPLICATE_KEY), (3, DUPLICATE_KEY)]
    assert sorted(d["k"] for d in db.e.find()) == [0, 1, 2, 3, 4]


def test_unordered_updates_go_on_past_an_error_and_report_its_index(
    db: Any, server: MongoServer, request: pytest.FixtureRequest
) -> None:
    deviation(
        server,
        request,
        "update ignores ordered=false: it stops at the first error, answers without n/nModified "
        "(pymongo raises KeyError) and the error index is not the op's",
        "https://github.com/FerretDB/FerretDB/issues/2612",
    )
    db.e.insert_many([{"_id": i, "v": "text" if i == 1 else i} for i in range(3)])
    ops = [pymongo.UpdateOne({"_id": i}, {"$inc": {"v": 10}}) for i in range(3)]
    with pytest.raises(BulkWriteError) as failed:
        db.e.bulk_write(ops, ordered=False)
    assert [e["index"] for e in failed.value.details["writeErrors"]] == [1]
    assert failed.value.details["nModified"] == 2
    assert db.e.find_one({"_id": 2})["v"] == 12


def test_a_conflicting_index_already_there_is_refused_loudly(
    db: Any, server: MongoServer, request: pytest.FixtureRequest
) -> None:
    """The store's unique (_f, _t) index is what makes its writes correct: a non-unique index of
    the same keys left by someone else must stop it (a person has to act), not be kept."""
    deviation(
        server,
        request,
        "createIndexes skips an index whose name exists, whatever its options: the non-unique "
        "index silently stays",
        "no upstream issue found; v1.24.2 sqlite/metadata/registry.go skips an existing name",
    )
    db.followers.create_index([("_f", 1), ("_t", 1)])
    with pytest.raises(OperationFailure) as conflict:
        MongoEdgeStore(db, "collection")
    assert conflict.value.code in {85, 86}  # IndexOptionsConflict, IndexKeySpecsConflict
    assert classify(conflict.value) is Failure.PERMANENT


def test_changing_the_following_mode_raises_no_index_conflict(db: Any) -> None:
    """``FANOUT_MONGO_FOLLOWING`` decides which indexes exist; switching it adds the other
    mode's indexes beside the first's, without an error (the data is not moved: see
    docs/edge-store.md)."""
    MongoEdgeStore(db, "index")
    MongoEdgeStore(db, "collection")
    MongoEdgeStore(db, "index")
    names = {i["name"] for i in db.followers.list_indexes()}
    assert "_f_1__t_1" in names and "_t_1_a_1__f_1__g_1_p_1" in names
    assert "_f_1__t_1" in {i["name"] for i in db.following.list_indexes()}


def test_bad_credentials_are_a_permanent_failure(server: MongoServer) -> None:
    """FerretDB embedded as a library cannot enforce authentication (the library's config has
    no switch for it): it refuses SCRAM as an unsupported mechanism, with the code MongoDB uses
    for a failed authentication, and would accept PLAIN with any password."""
    url = server.database_url().replace("mongodb://", "mongodb://nobody:wrong@", 1)
    client: pymongo.MongoClient[Any] = pymongo.MongoClient(url, serverSelectionTimeoutMS=5000)
    with client, pytest.raises(OperationFailure) as refused:
        client.get_default_database().command("ping")
    assert refused.value.code == 18  # AuthenticationFailed
    assert classify(refused.value) is Failure.PERMANENT


def test_a_known_users_query_near_the_16_mb_limit_is_answered(db: Any) -> None:
    store = MongoEdgeStore(db, "collection")
    store.apply([EdgeChange("a", "b", True, 1)])
    strangers = [f"{i:08d}" + "x" * 56 for i in range(200_000)]  # ~14 MB of ids in each $in
    assert store.known_users(["a", *strangers]) == {"a"}


def test_a_batch_cut_by_a_server_killed_mid_write_is_transient_and_a_retry_completes_it(
    ferretdb: MongoServer,
) -> None:
    """kill -9 of the server while ``apply`` writes: the driver's error is TRANSIENT (the
    consumer retries the batch), and applying the same batch again after the restart leaves
    exactly the batch's edges, whatever part of it had landed."""
    name = ferretdb.database_url().rpartition("/")[2]
    url = ferretdb.database_url(name)
    opts: dict[str, Any] = {"serverSelectionTimeoutMS": 20_000, "retryWrites": False}
    batch = [EdgeChange(f"f{i}", f"s{i % 50}", True, 100 + i) for i in range(4_000)]
    failed: list[BaseException] = []
    landed = threading.Event()

    def write() -> None:
        with pymongo.MongoClient(url, **opts) as client:
            try:
                MongoEdgeStore(client.get_default_database(), "collection").apply(batch)
            except PyMongoError as exc:
                failed.append(exc)

    with pymongo.MongoClient(url, **opts) as watcher:
        MongoEdgeStore(watcher.get_default_database(), "collection")  # indexes first
        writer = threading.Thread(target=write)
        writer.start()
        while writer.is_alive() and not landed.is_set():
            if watcher.get_default_database()["following"].estimated_document_count() > 0:
                landed.set()
        ferretdb.restart()
        writer.join(timeout=120)
    assert landed.is_set() and len(failed) == 1, "the kill did not land mid-batch"
    assert classify(failed[0]) is Failure.TRANSIENT
    with pymongo.MongoClient(url, **opts) as client:
        store = MongoEdgeStore(client.get_default_database(), "collection")
        store.apply(batch)
        held = store.positions([c.edge for c in batch])
        assert held == {c.edge: EdgeState(True, c.pos) for c in batch}
        assert client.get_default_database()["following"].count_documents({}) == len(batch)
        client.drop_database(name)


def test_a_stalled_server_is_a_transient_failure_and_a_retry_completes_the_batch(
    ferretdb: MongoServer,
) -> None:
    """The server stops answering mid-life (SIGSTOP): a store call fails once the socket
    timeout passes instead of holding the consumer in its batch for good, the failure is
    TRANSIENT, and the batch applied again once the server answers holds every edge."""
    assert ferretdb.pid is not None
    url = ferretdb.database_url()
    store = open_edge_store(f"{url}?socketTimeoutMS=1000", "collection")
    batch = [EdgeChange(f"f{i}", "star", True, 10 + i) for i in range(50)]
    os.kill(ferretdb.pid, signal.SIGSTOP)
    try:
        with pytest.raises(PyMongoError) as info:
            store.apply(batch)
    finally:
        os.kill(ferretdb.pid, signal.SIGCONT)
    assert classify(info.value) is Failure.TRANSIENT
    store.apply(batch)
    assert store.followers("star") == sorted(c.follower for c in batch)
    store.close()


def test_a_store_opened_without_a_socket_timeout_gets_one(ferretdb: MongoServer) -> None:
    url = ferretdb.database_url()
    for given, expected in (("", SOCKET_TIMEOUT_MS / 1000), ("?socketTimeoutMS=2500", 2.5)):
        store = open_edge_store(url + given)
        assert isinstance(store, MongoEdgeStore)
        client = store._db.client  # the driver's own view of the options it was given
        assert client.options.pool_options.socket_timeout == expected
        store.close()
