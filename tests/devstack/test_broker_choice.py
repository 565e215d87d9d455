"""Which broker the local stack runs: an explicit choice is obeyed or refused, never swapped;
by default Apache Kafka wherever Java is, Tansu elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from timeline_fanout_devstack.broker_choice import BrokerChoiceError, chosen_broker


def test_an_explicit_choice_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FANOUT_BROKER", "kafka")
    assert chosen_broker("tansu") == "tansu"
    assert chosen_broker() == "kafka"


def test_an_unknown_broker_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FANOUT_BROKER", "redpanda")
    with pytest.raises(BrokerChoiceError, match="kafka, tansu"):
        chosen_broker()


def test_without_java_the_default_is_tansu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("FANOUT_BROKER", raising=False)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no java, no mvn
    assert chosen_broker() == "tansu"


def test_with_java_and_no_jars_the_default_is_kafka_only_where_maven_may_fetch_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for tool in ("java", "mvn"):
        (tmp_path / tool).write_text("#!/bin/sh\n")
        (tmp_path / tool).chmod(0o755)
    monkeypatch.delenv("FANOUT_BROKER", raising=False)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("FANOUT_KAFKA_JARS", str(tmp_path / "empty-cache"))
    assert chosen_broker(fetch_allowed=True) == "kafka"
    assert chosen_broker(fetch_allowed=False) == "tansu"
