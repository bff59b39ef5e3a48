"""The flows facade end to end on sqs:// (moto) with a real burst worker: the memory
tests of ``tests/unit/flows/test_flows_api.py`` run again here with a ``queue`` on
SQS + DynamoDB (the imported test functions use this module's fixture)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from queue_core import Queue
from tests.unit.flows.test_flows_api import (
    test_a_script_exiting_non_zero_fails_with_exit_code,
    test_a_step_without_retries_fails_the_execution,
    test_an_async_step_is_cancelled_at_the_flow_deadline,
    test_cancel_a_running_execution,
    test_concurrency_queue_and_skip_through_the_facade,
    test_diamond_passes_results_by_parameter_name,
    test_flow_retry_lets_a_flaky_step_succeed_on_attempt_three,
    test_max_parallel_holds_with_a_real_worker,
    test_the_worker_stops_a_step_at_the_flow_deadline,
    test_yaml_script_steps_run_with_results_on_stdin,
)

__all__ = [
    "test_a_script_exiting_non_zero_fails_with_exit_code",
    "test_a_step_without_retries_fails_the_execution",
    "test_an_async_step_is_cancelled_at_the_flow_deadline",
    "test_cancel_a_running_execution",
    "test_concurrency_queue_and_skip_through_the_facade",
    "test_diamond_passes_results_by_parameter_name",
    "test_flow_retry_lets_a_flaky_step_succeed_on_attempt_three",
    "test_max_parallel_holds_with_a_real_worker",
    "test_the_worker_stops_a_step_at_the_flow_deadline",
    "test_yaml_script_steps_run_with_results_on_stdin",
]


@pytest.fixture
def queue(sqs_url: str) -> Iterator[Queue]:
    """A queue on the session's moto server, with a fresh prefix."""
    q = Queue(sqs_url)
    yield q
    q.close()
