"""The loop's pure policies: the dead-letter budget and what a failed commit means."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from timeline_fanout.consumers.dead_letter import DeadLetterError
from timeline_fanout.consumers.dlq_limit import DlqBudget, DlqLimit
from timeline_fanout.consumers.failures import Failure, classify
from timeline_fanout.consumers.halts import DlqLimitExceeded, PermanentFailure
from timeline_fanout.consumers.kafka_source import CommitRejected, CommitRetriable, commit_failure
from timeline_fanout.producers import DeliveryReport, PublishError


def test_consecutive_failures_halt_past_the_limit_and_a_success_resets_them() -> None:
    budget = DlqBudget(DlqLimit(max_consecutive=2, max_ratio=None))
    budget.failed()
    budget.failed()
    budget.applied()
    budget.failed()
    budget.failed()
    with pytest.raises(DlqLimitExceeded, match="3 events in a row"):
        budget.failed()


def test_the_ratio_counts_only_the_last_window_of_events() -> None:
    budget = DlqBudget(DlqLimit(max_consecutive=None, max_ratio=0.2, window=10))
    for _ in range(5):  # 2 failures per 10 events: at the limit, never past it
        budget.failed()
        budget.applied(4)
    budget.applied(10)  # the window slides past every failure so far
    budget.failed()
    budget.failed()
    with pytest.raises(DlqLimitExceeded, match="3 of the last 10 events"):
        budget.failed()


def test_a_trial_copy_leaves_the_budget_untouched() -> None:
    budget = DlqBudget(DlqLimit(max_consecutive=1))
    trial = budget.copy()
    trial.failed()
    assert (budget.streak, budget.seen) == (0, 0)
    assert trial.streak == 1


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError):
        DlqLimit(max_consecutive=0)
    with pytest.raises(ValueError):
        DlqLimit(max_ratio=1.5)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        # Apache Kafka's and Tansu's answer to a kicked member's commit (test_consume_loop).
        (KafkaError.UNKNOWN_MEMBER_ID, CommitRejected),
        (KafkaError.ILLEGAL_GENERATION, CommitRejected),
        (KafkaError.REBALANCE_IN_PROGRESS, CommitRejected),
        # A stopping static member already replaced by its restart: the new owner redoes it.
        (KafkaError.FENCED_INSTANCE_ID, CommitRejected),
        (KafkaError.COORDINATOR_NOT_AVAILABLE, CommitRetriable),
        (KafkaError._TIMED_OUT, CommitRetriable),
        (KafkaError.GROUP_AUTHORIZATION_FAILED, PermanentFailure),
    ],
)
def test_what_a_failed_commit_means(code: int, expected: type[Exception]) -> None:
    assert type(commit_failure(KafkaError(code))) is expected


def test_a_fatal_commit_error_halts() -> None:
    fenced = KafkaError(KafkaError.FENCED_INSTANCE_ID, "fenced", fatal=True)
    assert isinstance(commit_failure(fenced), PermanentFailure)


def test_kafka_side_steps_of_a_batch_are_transient() -> None:
    assert classify(DeadLetterError("2 pending")) is Failure.TRANSIENT
    assert classify(PublishError(DeliveryReport(undelivered=3))) is Failure.TRANSIENT
    assert classify(CommitRetriable("coordinator moving")) is Failure.TRANSIENT
    assert classify(CommitRejected("rebalanced")) is Failure.POISON  # handled by the loop itself
