"""`fanout ring change` and `fanout ring show`: a fourth memcached server taken into use and
removed again through the record in the edge store, lists exact for a process that keeps
using the cache between the changes."""

from __future__ import annotations

from tests.conftest import run_cli
from timeline_fanout.cli import wiring
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph import EdgeChange, ListKind, ListRef
from timeline_fanout_devstack.memcached_processes import own_server

FAST = {"FANOUT_RING_LEASE_S": "0.2", "FANOUT_CACHE_TIMEOUT_S": "0.3"}


def test_a_server_added_and_removed_by_the_ring_command_keeps_lists_exact(
    settings: Settings,
) -> None:
    settings = settings.model_copy(update={"ring_lease_s": 0.2, "cache_timeout_s": 0.3})
    three = [f"{host}:{port}" for host, port in settings.memcached_servers]
    store = wiring.edge_store(settings)
    lists = wiring.list_store(settings, store)
    users = [f"u{i}" for i in range(40)]
    store.apply([EdgeChange(u, "star", True, i + 1) for i, u in enumerate(users)])
    star = ListRef(ListKind.FOLLOWERS, "star")
    assert lists.read(star) == set(users)

    # The first process to read the record wrote the configured servers, and its lease.
    shown = run_cli(settings, "ring", "show", env=FAST)
    assert shown.returncode == 0 and shown.stdout.decode().splitlines() == [
        "lease: 0.2 s (every process reads the record this often)",
        f"version 1: {', '.join(sorted(three))}",
    ]
    with own_server() as (_, (host, port)):
        four = [*three, f"{host}:{port}"]
        grown = run_cli(settings, "ring", "change", *four, env=FAST)
        assert grown.returncode == 0, grown.stderr.decode()
        assert b"version 2" in grown.stdout and f"{host}:{port}".encode() in grown.stdout
        changes = [EdgeChange(u, f"v{i % 7}", True, 100 + i) for i, u in enumerate(users)]
        for change in store.apply(changes):
            ref = ListRef(ListKind.FOLLOWERS, change.followee)
            lists.apply({ref: [(True, change.follower, change.pos)]})
        expected = {f"v{n}": {u for i, u in enumerate(users) if i % 7 == n} for n in range(7)}
        refs = [ListRef(ListKind.FOLLOWERS, name) for name in expected]
        assert lists.read_many(refs) == {r: frozenset(expected[r.user]) for r in refs}
        again = run_cli(settings, "ring", "change", *four, env=FAST)
        assert again.returncode == 2 and b"already has exactly these servers" in again.stderr
        shrunk = run_cli(settings, "ring", "change", *three, env=FAST)
        assert shrunk.returncode == 0, shrunk.stderr.decode()
    assert lists.read_many(refs) == {r: frozenset(expected[r.user]) for r in refs}
    assert lists.read(star) == set(users)
    shown = run_cli(settings, "ring", "show", env=FAST)
    assert shown.stdout.decode().splitlines()[-1] == f"version 3: {', '.join(sorted(three))}"
