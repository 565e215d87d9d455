"""The ring record in each edge store (graph/stores/ring_records.py): read as written, swapped
only from the record the writer read, one winner when writers race, readable from any thread."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mongo_servers import MongoServer
from timeline_fanout.graph.stores.ring_records import open_ring_source
from timeline_fanout.memcache.ring import RingRecord, RingSource

THREE = ("10.0.0.1:11211", "10.0.0.2:11211", "10.0.0.3:11211")
FOUR = (*THREE, "10.0.0.4:11211")


@pytest.fixture(params=["sqlite", "ferretdb", "real_mongodb"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'edges.db'}"
        return
    server: MongoServer = request.getfixturevalue(request.param)
    name = f"fanout_ring_{uuid.uuid4().hex[:8]}"
    yield server.database_url(name)
    client = server.client()
    client.drop_database(name)
    client.close()


def test_a_store_that_never_had_a_record_reads_none(url: str) -> None:
    assert open_ring_source(url).read_ring() is None


def test_a_record_is_written_once_from_none_and_read_back_by_another_source(url: str) -> None:
    first = RingRecord.of(THREE)
    assert open_ring_source(url).swap_ring(None, first)
    assert not open_ring_source(url).swap_ring(None, RingRecord.of(FOUR))
    assert open_ring_source(url).read_ring() == first


def test_a_swap_from_a_record_someone_replaced_is_refused_and_theirs_stays(url: str) -> None:
    first = RingRecord.of(THREE)
    source = open_ring_source(url)
    assert source.swap_ring(None, first)
    moving = first.moved_to(FOUR)
    assert source.swap_ring(first, moving)
    assert not open_ring_source(url).swap_ring(first, first.moved_to(THREE[:2]))
    assert source.swap_ring(moving, moving.settled())
    assert not source.swap_ring(moving, moving.settled())
    assert source.read_ring() == moving.settled()


def test_of_writers_racing_from_one_record_exactly_one_wins(url: str) -> None:
    first = RingRecord.of(THREE)
    assert open_ring_source(url).swap_ring(None, first)
    targets = [FOUR, THREE[:2], (*THREE, "10.0.0.5:11211"), (*THREE, "10.0.0.6:11211")]
    sources: list[RingSource] = [open_ring_source(url) for _ in targets]
    start = threading.Barrier(len(targets))
    won: list[bool] = [False] * len(targets)

    def race(at: int) -> None:
        start.wait()
        won[at] = sources[at].swap_ring(first, first.moved_to(targets[at]))

    threads = [threading.Thread(target=race, args=(at,)) for at in range(len(targets))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert won.count(True) == 1
    winner = targets[won.index(True)]
    assert open_ring_source(url).read_ring() == first.moved_to(winner)


def test_a_source_is_read_from_threads_other_than_its_openers(url: str) -> None:
    source = open_ring_source(url)
    assert source.swap_ring(None, RingRecord.of(THREE))
    seen: list[RingRecord | None] = []
    reader = threading.Thread(target=lambda: seen.append(source.read_ring()))
    reader.start()
    reader.join()
    assert seen == [RingRecord.of(THREE)]
