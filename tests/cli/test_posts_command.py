"""``fanout posts``: one author's posts with their texts, paged by the cursor it prints."""

from __future__ import annotations

import orjson

from tests.conftest import run_cli
from timeline_fanout.cli import wiring
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph.model.edges import PostRecord


def test_pages_walked_by_the_printed_cursor_show_every_post_once_with_its_text(
    settings: Settings,
) -> None:
    store = wiring.edge_store(settings)
    posts = [PostRecord("ann", f"p{i}", 1_700_000_000_000 + i, f"hello {i}") for i in range(5)]
    store.store_posts(posts)
    store.close()
    shown, before = [], []
    while True:
        done = run_cli(settings, "posts", "ann", "--limit", "2", "--json", *before)
        assert done.returncode == 0, done.stderr
        body = orjson.loads(done.stdout)
        shown += [(p["post_id"], p["text"]) for p in body["posts"]]
        if body["next"] is None:
            break
        before = ["--before", body["next"]]
    assert shown == [(f"p{i}", f"hello {i}") for i in reversed(range(5))]
    plain = run_cli(settings, "posts", "ann", "--limit", "1").stdout.decode()
    assert "p4" in plain and "hello 4" in plain and "next page: --before " in plain
    refused = run_cli(settings, "posts", "ann", "--before", "nonsense")
    assert refused.returncode != 0 and b"--before" in refused.stderr
