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


@pytest.mark.parametrize("separator", ["-", "_", "--"])
def test_the_slug_replaces_each_run_of_other_characters_as_the_regular_expression_did(separator):
    import random
    import string

    from airflow_stepop.backends.naming import _slug

    alphabet = string.ascii_letters[:5] + string.digits[:3] + "-_./ :\0äé中"
    rng = random.Random(7)
    texts = ["", "-", "--", "a", "-a-", "a--b", "__x__", "ünïcode_dag-täsk", "..a..b..", "x-"]
    texts += ["".join(rng.choices(alphabet, k=rng.randint(0, 12))) for _ in range(3000)]
    for text in texts:
        assert _slug(text, separator) == re.sub(r"[^A-Za-z0-9]+", separator, text), text
