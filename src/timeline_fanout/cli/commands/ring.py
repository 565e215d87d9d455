"""``fanout ring show`` and ``fanout ring change HOST:PORT...``: the memcached servers every
process uses, read from and changed in the shared ring record while the consumers and the API
run (memcache/ring.py, memcache/ring_change.py)."""

from __future__ import annotations

import argparse

from timeline_fanout.cli import wiring
from timeline_fanout.cli.commands.base import Subcommands, console, err_console
from timeline_fanout.cli.settings import Settings
from timeline_fanout.memcache.ring import EpochState, RingRecord
from timeline_fanout.memcache.ring_change import RingChangeError, change_ring, hold_s


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("ring", help="show or change the memcached servers in use")
    verbs = p.add_subparsers(dest="verb", required=True)
    verbs.add_parser("show", help="the servers of every ring version, newest last")
    change = verbs.add_parser(
        "change",
        help="take these servers into use while everything runs (run again to finish an "
        "interrupted change)",
    )
    change.add_argument("servers", nargs="+", metavar="HOST:PORT")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    source = wiring.ring_source(settings)
    configured = [f"{host}:{port}" for host, port in settings.memcached_servers]
    if args.verb == "show":
        record = source.read_ring()
        if record is None:
            console.print(f"no ring recorded: the configured servers {', '.join(configured)}")
            return 0
        _show(record)
        return 0
    servers = [_server(s) for s in args.servers]
    bounds = wiring.trust_settings(settings)
    recorded = source.read_ring()
    # The lease every process uses is the record's, once it holds one (RingRecord.lease_s).
    lease_s = recorded.lease_s if recorded is not None and recorded.lease_s else 0.0
    try:
        changed = change_ring(
            source,
            configured,
            servers,
            hold_s(max(lease_s, settings.ring_lease_s), bounds),
            say=err_console.print,
            lease_s=settings.ring_lease_s,
        )
    except (RingChangeError, ValueError) as exc:
        err_console.print(f"ring change refused: {exc}")
        return 2
    _show(changed)
    return 0


def _server(value: str) -> str:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise SystemExit(f"{value!r}: a server is HOST:PORT")
    return f"{host}:{int(port)}"


def _show(record: RingRecord) -> None:
    if record.lease_s:
        console.print(f"lease: {record.lease_s:g} s (every process reads the record this often)")
    for offset, servers in enumerate(record.rings):
        version = record.first + offset
        state = " (moving to it)" if record.moving and version == record.version else ""
        console.print(f"version {version}{state}: {', '.join(servers)}")
    for server, epoch in record.epochs:
        if server in record.used and epoch.state is not EpochState.UP:
            console.print(f"{server}: {epoch.state.value} (missed writes; back once it answers)")
