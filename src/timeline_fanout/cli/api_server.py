"""The HTTP API (api/) on uvicorn, wired to the stack's settings (``fanout serve``).

``build_app`` is the factory uvicorn calls in every worker process (settings come from the
environment and the recorded stack, as for every command). Before anything listens,
``run_serve`` refuses a non-loopback address when no token key is configured: an open API
reachable from other machines would let anyone read any timeline and publish as anyone.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable

import uvicorn
from pydantic import ValidationError
from starlette.applications import Starlette

from timeline_fanout.api.app import create_app
from timeline_fanout.api.auth import AuthConfigError, TokenVerifier
from timeline_fanout.api.backends import Backends
from timeline_fanout.api.bounded_http import BoundedHttpTools, HeadLimits
from timeline_fanout.api.consumer_lag import ConsumerLag, WatchedGroup
from timeline_fanout.api.settings import ApiSettings
from timeline_fanout.cli import gc_policy, wiring
from timeline_fanout.cli.recorded_settings import load_settings
from timeline_fanout.cli.settings import Settings
from timeline_fanout.graph.lists.counts import list_counts
from timeline_fanout.graph.lists.shared_reads import SharedReads
from timeline_fanout.graph.timelines.fetch import ReadMemory
from timeline_fanout.graph.timelines.known_texts import KnownTexts
from timeline_fanout.graph.timelines.warm_reads import WarmReads
from timeline_fanout.memcache.trust import ServerTrust
from timeline_fanout.producers import EventPublisher

OPEN_REFUSED = (
    "refusing to listen on {host} without authentication: set FANOUT_API_JWT_SECRET "
    "(an HS256 secret) or FANOUT_API_JWT_PUBLIC_KEY (a PEM RSA or EC P-256 public key), "
    "or listen on a loopback address (--host 127.0.0.1)"
)


def open_backends(
    settings: Settings,
    api: ApiSettings,
    memory: ReadMemory,
    trust: ServerTrust,
    shared: wiring.StoreReads,
    known: KnownTexts,
    warm: WarmReads | None = None,
) -> Callable[[], Backends]:
    """Opens one API thread's store, lists, timeline reader and (lazily) publisher; the
    threads' readers share ``memory``, what they learnt of each user, ``trust``, which
    cache servers may be used, ``shared``, the store reads of lists whose server is not, and
    ``known``, the post texts known under a deletion mark. Each thread lends ``warm`` a reader
    of its own over its connections, for the plans the event loop runs
    (graph/timelines/warm_reads.py): the loop never opens the store."""
    # The producer gives up on an event when the API stops waiting for it, so a timed-out
    # request leaves nothing queued behind it for the next one's delivery report.
    kafka_config = {
        **settings.kafka_config,
        "message.timeout.ms": int(api.publish_timeout_s * 1000),
    }

    def publisher() -> EventPublisher:
        return EventPublisher(settings.kafka, settings.topics, kafka_config)

    lag = ConsumerLag(
        settings.kafka, watched_groups(settings), settings.kafka_config, api.ready_timeout_s
    )

    def opened() -> Backends:
        store = wiring.edge_store(settings)
        cache = wiring.cache_cluster(settings, trust)
        reader = wiring.timeline_reader(settings, store, memory, cache, shared, known)
        if warm is not None:
            warm.plan_with(wiring.timeline_reader(settings, store, memory, cache, shared, known))
        counts = list_counts(store, reader.follow_lists)
        return Backends(store, reader, counts, publisher, lag)

    return opened


def watched_groups(settings: Settings) -> list[WatchedGroup]:
    """The groups ``fanout consume graph|fanout`` join (cli/wiring.py names them)."""
    topics = settings.topics
    return [
        WatchedGroup("graph", wiring.group_id(settings, "graph"), (topics.graph,)),
        WatchedGroup(
            "fanout",
            wiring.group_id(settings, "fanout"),
            (topics.posts, topics.fanout_tasks),
        ),
    ]


def build_app() -> Starlette:
    app = app_for(load_settings(), ApiSettings())
    gc_policy.tune_for_serving()
    return app


def app_for(settings: Settings, api: ApiSettings) -> Starlette:
    """One worker process's app: its backend threads and its event loop's warm reads remember
    users' reads in one shared memory, and the post texts known under a deletion mark in
    another."""
    memory = ReadMemory()
    known = KnownTexts()
    trust = wiring.server_trust(settings)
    shared: wiring.StoreReads = SharedReads()
    warm = wiring.warm_reads(settings, trust, api.page_memo_mb << 20)
    app = create_app(api, open_backends(settings, api, memory, trust, shared, known, warm), warm)
    app.state.api.metrics.watch_cache(trust, shared.stats)
    return app


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


def check_config(host: str) -> str | None:
    """Why ``fanout serve`` must not start with this host and configuration, or None."""
    try:
        api = ApiSettings()
        TokenVerifier.from_settings(api)
    except ValidationError as exc:  # each broken rule, without the value (it may be a secret)
        broken = exc.errors(include_input=False, include_url=False)
        return "API settings: " + "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in broken
        )
    except AuthConfigError as exc:
        return f"API settings: {exc}"
    if not api.auth_configured and not is_loopback(host):
        return OPEN_REFUSED.format(host=host)
    return None


def run_serve(host: str, port: int, workers: int, verbose: bool) -> int:
    """uvicorn with the API's limits (docs/http-api-security.md): request heads and the time a
    body may take bounded by api/bounded_http.py, connections plus requests in progress by
    ``limit_concurrency`` (503 beyond), idle keep-alive connections closed after uvicorn's 5 s,
    no WebSocket upgrades, and no ``server`` header."""
    api = ApiSettings()
    limits = HeadLimits(
        api.max_header_bytes, api.max_headers, api.header_timeout_s, api.body_timeout_s
    )
    uvicorn.run(
        "timeline_fanout.cli.api_server:build_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        http=functools.partial(BoundedHttpTools, limits=limits),  # type: ignore[arg-type]
        ws="none",  # no route speaks WebSocket: no upgrade reaches another protocol's parser
        limit_concurrency=api.limit_concurrency,
        server_header=False,
        access_log=verbose,  # request lines only: headers, and so tokens, are never logged
        log_level="info" if verbose else "warning",
    )
    return 0
