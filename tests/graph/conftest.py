from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from graph.edges import EdgeStore
from tests.graph.edge_backends import BACKENDS, real_mongo_skip_reason


@pytest.fixture(params=list(BACKENDS))
def edge_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EdgeStore]:
    name: str = request.param
    if name.startswith("mongodb") and (reason := real_mongo_skip_reason()):
        pytest.skip(reason)
    with BACKENDS[name](tmp_path) as store:
        yield store
