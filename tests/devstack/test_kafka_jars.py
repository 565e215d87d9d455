"""The broker's jar cache: fetched once however many processes ask at the same moment, and never
trusted unless complete. Maven is replaced by a stub that copies jars slowly and counts its runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from timeline_fanout_devstack import kafka_jars

MVN = """#!/bin/sh
echo run >> "$STUBS/runs"
for arg in "$@"; do
  case "$arg" in -DoutputDirectory=*) out="${arg#-DoutputDirectory=}" ;; esac
done
mkdir -p "$out"
for jar in kafka_2.13-4.4.0 kafka-clients-4.4.0 scala-library-2.13.18; do
  sleep 0.2
  head -c 1000 /dev/zero > "$out/$jar.jar"
done
"""

FETCH = "from timeline_fanout_devstack.kafka_jars import fetch_jars; print(fetch_jars())"


@pytest.fixture
def stub_maven(tmp_path: Path) -> dict[str, str]:
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "mvn").write_text(MVN)
    (stubs / "mvn").chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{stubs}:{os.environ['PATH']}",
        "STUBS": str(stubs),
        "FANOUT_KAFKA_JARS": str(tmp_path / "cache"),
    }


def test_processes_fetching_at_once_download_once_and_all_get_the_complete_set(
    stub_maven: dict[str, str], tmp_path: Path
) -> None:
    fetchers = [
        subprocess.Popen([sys.executable, "-c", FETCH], env=stub_maven, stdout=subprocess.PIPE)
        for _ in range(4)
    ]
    found = {p.communicate(timeout=60)[0].decode().strip() for p in fetchers}
    assert [p.returncode for p in fetchers] == [0] * 4
    assert len(found) == 1
    directory = Path(found.pop())
    assert kafka_jars.is_complete(directory)
    assert sorted(p.name for p in directory.glob("*.jar")) == [
        "kafka-clients-4.4.0.jar",
        "kafka_2.13-4.4.0.jar",
        "scala-library-2.13.18.jar",
    ]
    assert (tmp_path / "stubs" / "runs").read_text().count("run") == 1
    assert [p.name for p in (tmp_path / "cache").iterdir() if p.name.endswith(".tmp")] == []


def test_a_cache_missing_a_jar_or_holding_a_short_one_is_not_trusted(
    stub_maven: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FANOUT_KAFKA_JARS", stub_maven["FANOUT_KAFKA_JARS"])
    monkeypatch.setenv("PATH", stub_maven["PATH"])
    monkeypatch.setenv("STUBS", stub_maven["STUBS"])
    directory = kafka_jars.fetch_jars()
    assert kafka_jars.cached_jars() == directory
    jar = directory / "kafka-clients-4.4.0.jar"
    jar.write_bytes(b"truncated")
    assert kafka_jars.cached_jars() is None
    jar.unlink()
    assert kafka_jars.cached_jars() is None
    assert kafka_jars.fetch_jars() == directory  # fetched again, whole
    assert kafka_jars.is_complete(directory)
