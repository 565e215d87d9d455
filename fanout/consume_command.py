"""``fanout consume``: run one consumer until stopped, idle, or halted.

Exit status: 0 after a stop (SIGINT/SIGTERM: the batch in hand is finished and committed, or, if
it was still failing, left uncommitted) or ``--until-idle``; otherwise the ``exit_code`` of the
halt (consumers/halts.py) — 3 dead-letter limit, 4 permanent store/cache/Kafka failure, 5 stuck
without an assignment — with one ERROR line naming the cause. Nothing of the batch in hand is
committed on a halt.
"""

from __future__ import annotations

import logging
import threading

from rich.console import Console

from consumers.halts import ConsumerHalted, PermanentFailure
from fanout import gc_policy, wiring
from fanout.settings import Settings
from graph.failures import Failure, classify

log = logging.getLogger("fanout.consumer")


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
    if metrics_port is not None:
        wiring.serve_metrics(loop, which, metrics_port)
    try:
        stats = loop.run(until_idle=until_idle)
    except ConsumerHalted as exc:
        return _halted(exc, console, loop.stats.retries)
    finally:
        loop.source.close()
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
