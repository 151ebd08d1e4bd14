"""Which steps' triggers end their tasks, and which resume in a worker (operators/trigger_end):
whatever Airflow runs only at a worker's end of a task keeps the worker."""

from __future__ import annotations

import json

import pytest
from airflow.sdk import DAG, Asset

from airflow_stepop import LocalStepOperator
from airflow_stepop.operators.trigger_end import worker_needed


def _step(**kwargs):
    return LocalStepOperator(task_id="t", python_callable=json.dumps, op_args=[1], **kwargs)


def _noop(*_):
    return None


def test_a_plain_step_ends_from_its_trigger():
    assert worker_needed(_step()) is None
    quiet = {"email_on_failure": False, "email_on_retry": False}
    assert worker_needed(_step(email="a@example.com", **quiet)) is None


@pytest.mark.parametrize(
    ("kwargs", "outcome", "reason"),
    [
        ({"on_success_callback": _noop}, "success", "on_success_callback"),
        ({"outlets": [Asset("s3://bucket/model")]}, "success", "outlets"),
        ({"post_execute": _noop}, "success", "post_execute"),
        ({"on_failure_callback": [_noop]}, "failure", "on_failure_callback"),
        ({"on_retry_callback": _noop}, "failure", "on_retry_callback"),
        ({"email": "a@example.com", "email_on_failure": True}, "failure", "email"),
        ({"on_skipped_callback": _noop}, "skip", "on_skipped_callback"),
    ],
)
def test_what_only_a_worker_runs_keeps_the_worker_for_that_end(kwargs, outcome, reason):
    """A failure's callback keeps the worker for a failure only, and so on."""
    step = _step(**kwargs)
    assert reason in worker_needed(step, outcome)
    for other in {"success", "failure", "skip"} - {outcome}:
        assert worker_needed(step, other) is None


def test_a_fail_fast_dag_keeps_the_worker():
    with DAG("fails_fast", schedule=None, fail_fast=True):
        step = _step()
    assert "fail_fast" in worker_needed(step, "failure")
    assert worker_needed(step, "success") is None


def test_the_option_turns_it_off(monkeypatch):
    monkeypatch.setenv("AIRFLOW__STEPOP__END_FROM_TRIGGER", "False")
    assert worker_needed(_step()) == "[stepop] end_from_trigger is off"
    monkeypatch.setenv("AIRFLOW__STEPOP__END_FROM_TRIGGER", "maybe")
    with pytest.raises(ValueError, match=r"end_from_trigger='maybe'.*must be True or False"):
        worker_needed(_step())
