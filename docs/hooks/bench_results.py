"""An mkdocs hook: the performance page's latest results, rendered from ``bench/results/*.json``.

A page marks where they go with ``<!-- bench-results -->``; the hook replaces the marker with one
section per JSON file directly in ``bench/results`` (sorted by stem; the ``brokers/`` runs, the
plots and the Markdown files beside them are not read): a heading with the benchmark's name, the
machine, date and commit the run recorded, and its rows as tables. The tables cannot drift from
the recorded runs: running a benchmark rewrites its file, and the next docs build shows it.

Rows are grouped by the set of their keys, each group one table in the order its first row was
recorded: a row of ratios and goals, or a phase with figures of its own, is not spread across
mostly empty columns of the rows it compares. A nested object becomes dotted columns
(``cached_count.p50_ms``). Cells stay short: numbers as recorded, booleans as yes/no, null as
nothing.

The build never fails on a results file: a file that does not parse or lacks the fields
``bench.support.report.Report`` writes renders as a one-line note under its heading, and so does
a file that is computed rather than measured (``COMPUTED``).
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

MARKER = re.compile(r"<!--\s*bench-results\s*-->")

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"

# Results that are arithmetic over the others, not a run on a machine: named, not tabled.
COMPUTED = {
    "capacity-model": (
        "computed from the results on this page by `python -m bench capacity-model`, not "
        "measured; the Capacity page shows it"
    ),
}

# Markdown would read these as emphasis, code, links or a cell's end; `<` as HTML.
_SPECIAL = re.compile(r"([\\`*_\[\]|])")


class NotAResult(ValueError):
    """A file in the results directory is not what ``Report.write`` writes."""


def load(path: Path) -> dict[str, Any]:
    """The parsed result, with ``machine`` an object, ``when`` a UTC time and ``rows`` a list of
    objects (what rendering relies on), or ``NotAResult`` saying what is wrong."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise NotAResult(f"could not be read ({type(e).__name__})") from e
    if not isinstance(doc, dict):
        raise NotAResult("is not a JSON object")
    if not isinstance(doc.get("machine"), dict):
        raise NotAResult("records no machine")
    if not isinstance(doc.get("when"), str):
        raise NotAResult("records no date")
    try:
        datetime.strptime(doc["when"], "%Y-%m-%dT%H:%M:%SZ")
    except ValueError as e:
        raise NotAResult(f"has a date that is not a UTC time: {doc['when']!r}") from e
    rows = doc.get("rows")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise NotAResult("has no rows of figures")
    return doc


def text(value: object) -> str:
    """``value`` as Markdown that renders as the same characters, on one line."""
    escaped = _SPECIAL.sub(r"\\\1", str(value)).replace("<", "&lt;")
    return " ".join(escaped.split())


def provenance(doc: dict[str, Any]) -> str:
    """The line under a section's heading: where, when and from which commit."""
    machine = doc["machine"]
    parts = [
        text(machine["cpu"]) if machine.get("cpu") else None,
        f"{text(machine['cpus'])} CPUs" if machine.get("cpus") is not None else None,
        f"{text(machine['memory_gib'])} GiB" if machine.get("memory_gib") is not None else None,
    ]
    where = ", ".join(p for p in parts if p) or "an unrecorded machine"
    day = datetime.strptime(doc["when"], "%Y-%m-%dT%H:%M:%SZ").date().isoformat()
    commit = doc.get("commit")
    if not commit:
        revision = "commit not recorded"
    elif doc.get("dirty"):
        revision = f"commit {text(commit)} with uncommitted changes"
    else:
        revision = f"commit {text(commit)}"
    quick = " (a `--quick` run: smoke size)" if doc.get("quick") is True else ""
    return f"Measured on {where}, {day}, {revision}{quick}."


def cell(value: object) -> str:
    """A short cell: numbers as recorded, booleans as yes/no, nothing for null; a list's items
    separated by commas, an item that is itself a list in parentheses."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(f"({cell(v)})" if isinstance(v, list) else cell(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{text(k)} {cell(v)}" for k, v in value.items())
    return text(value)


def flatten(row: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``row`` with each nested object's fields as columns of their own, named by their path."""
    flat: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def tables(rows: list[dict[str, Any]]) -> list[str]:
    """One Markdown table per set of (flattened) keys, in the order each set first appears, its
    columns in the order of its first row: every row of a table has every column."""
    groups: dict[frozenset[str], list[dict[str, Any]]] = {}
    for row in map(flatten, rows):
        groups.setdefault(frozenset(row), []).append(row)
    rendered = []
    for group in groups.values():
        columns = list(group[0])
        lines = [
            "| " + " | ".join(text(c) for c in columns) + " |",
            "| " + " | ".join("---" for _ in columns) + " |",
        ]
        lines += ["| " + " | ".join(cell(row[c]) for c in columns) + " |" for row in group]
        rendered.append("\n".join(lines))
    return rendered


def section(path: Path) -> str:
    """A results file's section: its heading, then its provenance and tables or a note."""
    heading = f"### {text(path.stem)}"
    if path.stem in COMPUTED:
        return f"{heading}\n\n`{path.name}` is {COMPUTED[path.stem]}."
    try:
        doc = load(path)
    except NotAResult as e:
        return f"{heading}\n\n`{path.name}` {e}: no figures are shown for it."
    return "\n\n".join([heading, provenance(doc), *tables(doc["rows"])])


def render_results(directory: Path) -> str:
    """Every results file's section, sorted by file name."""
    paths = sorted((p for p in directory.glob("*.json") if p.is_file()), key=lambda p: p.stem)
    if not paths:
        return f"No results are recorded in `{directory.name}/`."
    return "\n\n".join(section(p) for p in paths)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """mkdocs' hook: a marker on a page becomes the sections of ``bench/results``."""
    return MARKER.sub(lambda _m: render_results(RESULTS), markdown)
