from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.graph.stores.edge_backends import BACKENDS
from tests.graph.timelines.warm_pair import Pair, count_multi_gets, make_pair
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph.model.edges import EdgeStore


@pytest.fixture(params=list(BACKENDS))
def edge_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EdgeStore]:
    with BACKENDS[request.param](request, tmp_path) as store:
        yield store


@pytest.fixture
def multi_gets(monkeypatch: pytest.MonkeyPatch) -> list[list[bytes]]:
    """The keys of every ``AsyncMemcache.gets_many`` call of the test, in order."""
    return count_multi_gets(monkeypatch)


@pytest.fixture
def pair(settings: Settings, multi_gets: list[list[bytes]]) -> Iterator[Pair]:
    """A blocking reader and warm reads sharing a ``ReadMemory`` (timelines/warm_pair.py)."""
    made = make_pair(settings, multi_gets)
    yield made
    made.close()
