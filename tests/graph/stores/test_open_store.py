"""Opening the edge store from a URL: errors never repeat credentials, and a MongoDB URL whose
settings would break the store's write or its read-after-write is refused before any write."""

from __future__ import annotations

import pytest
from pymongo.errors import ConfigurationError

from tests.mongo_servers import MongoServer
from timeline_fanout.graph import open_edge_store
from timeline_fanout.graph.stores.open import redact


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgres://admin:s3cret@db.example:5432/edges?password=s3cret",
            "postgres://db.example:5432",
        ),
        ("redis://:s3cret@[::1]:6379/0", "redis://[::1]:6379"),
        ("admin:s3cret@db.example/edges", "(not a scheme://host URL)"),
        ("s3cret", "(not a scheme://host URL)"),
        ("http://admin:s3cret@db.example:99999/", "http://?"),
    ],
)
def test_redact_keeps_scheme_and_host_only(url: str, shown: str) -> None:
    assert redact(url) == shown


def test_an_unsupported_url_is_refused_without_its_credentials() -> None:
    with pytest.raises(ValueError) as info:
        open_edge_store("postgres://admin:s3cret@db.example/edges")
    assert "s3cret" not in str(info.value) and "admin" not in str(info.value)
    assert "postgres://db.example" in str(info.value)


@pytest.mark.parametrize(
    ("option", "named"),
    [("w=0", "w=0"), ("readPreference=secondaryPreferred", "readPreference")],
)
def test_a_mongodb_url_that_drops_write_errors_or_reads_elsewhere_is_refused(
    ferretdb: MongoServer, option: str, named: str
) -> None:
    """Unacknowledged writes return no duplicate-key errors (a newer change to an existing edge
    would be dropped unseen); a secondary may not hold the removal check's own writes yet."""
    url = ferretdb.database_url()
    with pytest.raises(ConfigurationError, match=named):
        open_edge_store(f"{url}?{option}")
    with ferretdb.client() as client:
        assert client[url.rpartition("/")[2]].list_collection_names() == []
