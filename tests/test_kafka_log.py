"""librdkafka's lines through Python logging (timeline_fanout.kafka_log), in the form
confluent-kafka hands them over: ``logger.log(level, "%s [%s] %s", facility, client, line)``."""

from __future__ import annotations

import logging

import pytest

from timeline_fanout.kafka_log import LOGGER

GETPID = (
    "GETPID",
    "rdkafka#producer-1",
    "[thrd:main]: Failed to acquire idempotence PID from broker 127.0.0.1:9092/1: "
    "Coordinator load in progress: retrying",
)
FAIL = ("FAIL", "rdkafka#producer-1", "127.0.0.1:1/bootstrap: Connect to 127.0.0.1:1 failed")


def test_the_coordinator_loading_retry_is_logged_at_info_and_other_warnings_stay(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER.name)
    LOGGER.log(logging.WARNING, "%s [%s] %s", *GETPID)
    LOGGER.log(logging.WARNING, "%s [%s] %s", *FAIL)
    LOGGER.log(logging.ERROR, "%s [%s] %s", *GETPID)  # only warnings are lowered
    assert [(r.levelname, r.getMessage().split()[0]) for r in caplog.records] == [
        ("INFO", "GETPID"),
        ("WARNING", "FAIL"),
        ("ERROR", "GETPID"),
    ]


def test_the_coordinator_loading_retry_is_not_logged_where_info_is_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER.name)
    LOGGER.log(logging.WARNING, "%s [%s] %s", *GETPID)
    LOGGER.log(logging.WARNING, "%s [%s] %s", *FAIL)
    assert [r.getMessage().split()[0] for r in caplog.records] == ["FAIL"]
