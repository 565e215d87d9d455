"""Opening the edge store from a URL: errors never repeat credentials."""

from __future__ import annotations

import pytest

from graph import open_edge_store
from graph.stores.open import redact


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
