"""librdkafka's log, through Python logging.

Left alone, librdkafka writes its log to stderr in a format of its own
(``%4|1795841357.606|GETPID|rdkafka#producer-5| ...``), past Python logging: the lines land
among a command's output, in neither of the formats ``--log-format`` offers, whatever the
CLI's level. Given a ``logger``, confluent-kafka hands each line to it instead, at the Python
level matching the line's syslog level (``%3`` ERROR, ``%4`` WARNING, ``%6`` INFO), whenever
the client is polled. A client never polled (our AdminClients) drops its lines unread: its
failures reach the caller as exceptions anyway.

Every Producer, Consumer and AdminClient of the product and the local stack is configured
through ``logged``, so librdkafka's lines come under the ``librdkafka`` logger, at the level and
in the format the CLI set for all its logging.

Lines librdkafka logs as warnings about a normal condition it retries by itself are logged at
INFO instead (``EXPECTED_RETRIES``): an idempotent producer started while the broker's
transaction coordinator is still loading (a broker just started) is told "Coordinator load in
progress" and asks again; it is not something an operator should act on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

LOGGER = logging.getLogger("librdkafka")
# (start of the line, part of it): warnings of conditions librdkafka retries by itself.
EXPECTED_RETRIES = (("Failed to acquire idempotence PID", "Coordinator load in progress"),)


class ExpectedRetries(logging.Filter):
    """Lowers the lines of ``EXPECTED_RETRIES`` to INFO, and drops them where INFO is not
    logged (the logger let them through at WARNING)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        message = record.getMessage()
        if not any(start in message and part in message for start, part in EXPECTED_RETRIES):
            return True
        record.levelno, record.levelname = logging.INFO, "INFO"
        return LOGGER.isEnabledFor(logging.INFO)


LOGGER.addFilter(ExpectedRetries())


def logged(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with librdkafka's log going to ``LOGGER``: pass it to the client's constructor."""
    return {**config, "logger": LOGGER}
