"""``fanout consume``: run one consumer until stopped, idle, or halted.

Exit status: 0 after a stop (SIGINT/SIGTERM: the batch in hand is finished and committed, or, if
it was still failing, left uncommitted) or ``--until-idle``; otherwise the ``exit_code`` of the
halt (consumers/halts.py) — 3 dead-letter limit, 4 permanent store/cache/Kafka failure, 5 stuck
without an assignment — with one ERROR line naming the cause. Nothing of the batch in hand is
committed on a halt.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from pathlib import Path
from types import FrameType

from rich.console import Console

from timeline_fanout import healthcheck
from timeline_fanout.cli import gc_policy, wiring
from timeline_fanout.cli.commands.base import Subcommands, err_console
from timeline_fanout.cli.settings import Settings
from timeline_fanout.consumers.halts import ConsumerHalted, PermanentFailure
from timeline_fanout.graph.failures import Failure, classify

log = logging.getLogger("fanout.consumer")


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser("consume", help="run a consumer")
    p.add_argument("which", choices=["graph", "fanout"])
    p.add_argument("--until-idle", type=float, metavar="SECONDS")
    p.add_argument("--batch-size", type=int)
    p.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus metrics on this port (0: a free one; the port bound is recorded "
        "in FANOUT_HOME for the container healthcheck)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.batch_size:
        field = "graph_batch_size" if args.which == "graph" else "batch_size"
        settings = settings.model_copy(update={field: args.batch_size})
    stop = stop_on_signals()
    return run_consume(settings, args.which, stop, args.until_idle, args.metrics_port, err_console)


def stop_on_signals() -> threading.Event:
    """SIGINT and SIGTERM set the event: the loop finishes the batch in hand, then stops."""
    stop = threading.Event()

    def handler(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger("fanout").info("signal %d: finishing the current batch", signum)
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return stop


def run_consume(
    settings: Settings,
    which: str,
    stop: threading.Event,
    until_idle: float | None,
    metrics_port: int | None,
    console: Console,
) -> int:
    build = wiring.graph_loop if which == "graph" else wiring.fanout_loop
    try:
        loop = build(settings, stop)
    except Exception as exc:  # the edge store would not open: corrupt, unreadable, bad URL
        if classify(exc) is not Failure.PERMANENT:
            raise
        return _halted(PermanentFailure(f"{type(exc).__name__}: {exc}"), console)
    gc_policy.tune_for_consuming()
    recorded: Path | None = None
    if metrics_port is not None:
        bound = wiring.serve_metrics(loop, which, metrics_port)
        recorded = healthcheck.record_port(settings.home, which, bound)
        log.info("metrics on port %d", bound)
    try:
        stats = loop.run(until_idle=until_idle)
    except ConsumerHalted as exc:
        return _halted(exc, console, loop.stats.retries)
    finally:
        loop.source.close()
    if recorded is not None:  # a halted consumer's port stays recorded: its check fails
        recorded.unlink(missing_ok=True)
    console.print(
        f"batches {stats.batches}, applied {stats.applied}, "
        f"dead-lettered {stats.dead_lettered} (rejected {stats.rejected}, "
        f"failed to apply {stats.apply_failed}), retries {stats.retries}, "
        f"abandoned {stats.abandoned}, commits refused {stats.commits_rejected}"
    )
    return 0


def _halted(exc: ConsumerHalted, console: Console, retries: int = 0) -> int:
    cause = f" (caused by {type(exc.__cause__).__name__})" if exc.__cause__ is not None else ""
    log.error("consumer halted, batch in hand not committed: %s%s", exc, cause)
    console.print(
        f"[red]halted[/red] ({type(exc).__name__}, exit {exc.exit_code}): {exc}; "
        f"nothing of the batch in hand was committed; retries {retries}",
        markup=True,
        highlight=False,
    )
    return exc.exit_code
