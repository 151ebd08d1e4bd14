"""Job names: deterministic, valid for the services, and one prefix for all tries of a task."""

from __future__ import annotations

import re

import pytest

from airflow_stepop.backends.naming import job_name, key_prefix, task_key

SAGEMAKER_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")


@pytest.mark.parametrize(
    "key",
    [
        task_key("etl", "manual__2026-01-01T00:00:00+00:00", "train", -1),
        task_key("a" * 200, "scheduled__x", "b" * 200, 17),
        task_key("__weird__dag__", "r", "--task--", 0),
        task_key("ünïcode_dag", "r", "täsk", 3),
    ],
)
def test_names_are_valid_and_every_try_shares_the_prefix(key):
    prefix = key_prefix(key)
    for try_number in (1, 9, 10, 123, 9999):
        name = job_name(key, try_number)
        assert SAGEMAKER_NAME.match(name), name
        assert name == f"{prefix}-t{try_number}"


def test_names_are_deterministic_and_distinguish_task_instances():
    one = task_key("dag", "run", "task", 0)
    other = task_key("dag", "run", "task", 1)
    assert job_name(one, 1) == job_name(one, 1)
    assert key_prefix(one) != key_prefix(other)
    assert job_name(one, 1).startswith("dag-task-")


def test_shorter_limits_are_honoured():
    name = job_name(task_key("d" * 80, "r", "t" * 80, -1), 42, max_length=32)
    assert len(name) <= 32 and name.endswith("-t42")


def test_a_long_dag_id_leaves_the_task_id_in_the_name():
    """The task id tells one DAG's jobs apart in the service's job list."""
    dag_id = "customer_lifetime_value_forecasting_pipeline_v2_production"
    name = job_name(task_key(dag_id, "run", "train_gradient_boosted_model", -1), 1)
    assert len(name) <= 63
    assert "-train-gradient-boosted-model-" in name
    assert name.startswith("customer-lifetime")
    long_task = job_name(task_key(dag_id, "run", "t" * 80, -1), 1)
    assert "customer" in long_task and "t" * 20 in long_task
