"""A benchmark's JSON names the commit it measured, or says it could not (no servers needed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import orjson
import pytest

from bench.support.report import Report, checkout

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@example.org",
            *args,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A checkout with a benchmark's file and a committed result, clean."""
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "one.py").write_text("x = 1\n")
    (tmp_path / "bench" / "results" / "one.json").write_text("{}\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-q", "-m", "one")
    return tmp_path


@needs_git
def test_a_clean_checkout_records_its_commit(repo: Path) -> None:
    found = checkout(repo / "bench" / "one.py", repo / "bench" / "results")
    assert found == {"commit": _git(repo, "rev-parse", "--short", "HEAD"), "dirty": False}


@needs_git
def test_changed_code_is_dirty_rewritten_results_and_untracked_files_are_not(repo: Path) -> None:
    source, results = repo / "bench" / "one.py", repo / "bench" / "results"
    (results / "one.json").write_text('{"rows": []}\n')
    (repo / "notes.txt").write_text("untracked\n")
    assert checkout(source, results)["dirty"] is False
    source.write_text("x = 2\n")
    assert checkout(source, results)["dirty"] is True


@needs_git
def test_a_file_no_repository_tracks_records_no_commit(repo: Path) -> None:
    unpacked = repo / "unpacked" / "bench"
    unpacked.mkdir(parents=True)
    (unpacked / "one.py").write_text("x = 1\n")
    assert checkout(unpacked / "one.py", unpacked / "results") == {"commit": None, "dirty": None}


def test_outside_any_repository_no_commit_is_recorded(tmp_path: Path) -> None:
    (tmp_path / "one.py").write_text("x = 1\n")
    assert checkout(tmp_path / "one.py", tmp_path) == {"commit": None, "dirty": None}


def test_the_json_keeps_its_fields_and_adds_the_commit(tmp_path: Path) -> None:
    report = Report("example", tmp_path, quick=True)
    report.add(size=1, per_s=2.5)
    doc = orjson.loads(report.write([("per_s", 2.5)], "per s").read_bytes())
    assert list(doc) == [
        "benchmark",
        "quick",
        "machine",
        "when",
        "peak_rss_mib",
        "rows",
        "commit",
        "dirty",
    ]
    assert doc["rows"] == [{"size": 1, "per_s": 2.5}]
    assert doc["commit"] is None or isinstance(doc["commit"], str)
