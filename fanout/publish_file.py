"""``fanout publish --file``: one JSON event per line; bad lines are reported, good ones sent."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import BinaryIO

from rich.console import Console
from rich.progress import Progress

from producers import EventPublisher
from schemas import EventDecodeError, decode_event


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
        details = [f"line {n}: {why}" for n, why in (self.rejected + self.failed)[:20]]
        return "\n".join([text, *details])


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


def publish_file(publisher: EventPublisher, path: str, console: Console) -> FileSummary:
    summary = FileSummary()
    stream: BinaryIO = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    with stream, Progress(console=console, disable=not console.is_terminal) as progress:
        task = progress.add_task("publishing", total=None)

        def counted() -> Iterable[bytes]:
            for line in stream:
                progress.advance(task)
                yield line

        publish_lines(publisher, counted(), summary)
    return summary
