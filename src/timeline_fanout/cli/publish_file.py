"""``fanout publish --file``: one JSON event per line; bad lines are reported, good ones sent.

The summary names the first ``SHOWN`` bad lines; ``--rejects FILE`` gets every rejected line as
one JSON object per line, ``{"line": N, "reason": "..."}``, for a script to fix and resend.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import orjson
from rich.console import Console
from rich.progress import Progress

from timeline_fanout.producers import EventPublisher
from timeline_fanout.schemas import EventDecodeError, decode_event

SHOWN = 20


@dataclass
class FileSummary:
    published: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)
    failed: list[tuple[int, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.rejected and not self.failed

    def line(self) -> str:
        text = (
            f"published {self.published}, rejected {len(self.rejected)}, failed {len(self.failed)}"
        )
        bad = self.rejected + self.failed
        details = [f"line {n}: {why}" for n, why in bad[:SHOWN]]
        if len(bad) > SHOWN:
            details.append(f"... and {len(bad) - SHOWN} more (--rejects FILE lists every one)")
        return "\n".join([text, *details])

    def write_rejects(self, out: BinaryIO) -> None:
        out.writelines(orjson.dumps({"line": n, "reason": why}) + b"\n" for n, why in self.rejected)


def publish_lines(publisher: EventPublisher, lines: Iterable[bytes], summary: FileSummary) -> None:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:  # invalid, or a type apps may not publish (an internal fanout_task)
            publisher.publish(decode_event(line.strip()), tag=number)
        except EventDecodeError as exc:
            summary.rejected.append((number, str(exc)))
    report = publisher.flush()
    summary.published += report.delivered
    summary.failed += [(int(str(f.tag)), f.error) for f in report.failed]
    if report.undelivered:
        summary.failed.append((0, f"{report.undelivered} events still queued at timeout"))


def publish_file(
    publisher: EventPublisher, path: str, console: Console, rejects: str | None = None
) -> FileSummary:
    summary = FileSummary()
    stream = sys.stdin.buffer if path == "-" else _open(path, "rb", "--file")
    rejects_out = _open(rejects, "wb", "--rejects") if rejects is not None else None
    with stream, Progress(console=console, disable=not console.is_terminal) as progress:
        task = progress.add_task("publishing", total=None)

        def counted() -> Iterable[bytes]:
            for line in stream:
                progress.advance(task)
                yield line

        publish_lines(publisher, counted(), summary)
    if rejects_out is not None:
        with rejects_out:
            summary.write_rejects(rejects_out)
    return summary


def _open(path: str, mode: str, option: str) -> BinaryIO:
    """Opened before anything is published, so a bad path is an error and not a half-done run."""
    try:
        return Path(path).open(mode)  # type: ignore[return-value]
    except OSError as exc:
        raise SystemExit(f"{option} {path}: {exc.strerror or exc}") from None
