"""What the local backend hands a job's process, and the request it is made from."""

from __future__ import annotations

import os

import pytest

from airflow_stepop.backends.base import JobRequest
from airflow_stepop.backends.local import _job_environment


def _request(**kwargs):
    return JobRequest(
        "job-t1", "dag/run/task/-1", "file:///r/spec.json", "file:///r", "file:///c.zip", **kwargs
    )


def test_the_job_gets_the_workers_environment_without_airflows_own_plus_the_steps(monkeypatch):
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", "secret")
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", "postgres://user:password@host/db")
    monkeypatch.setenv("STEPOP_TEST_KEPT", "kept")
    monkeypatch.setenv("PYTHONPATH", "/the/workers/path")

    env = _job_environment(_request(environment={"GREETING": "grüß dich"}), "/bundles/abc.zip")

    assert not [key for key in env if key.startswith(b"AIRFLOW")]
    assert env[b"STEPOP_TEST_KEPT"] == b"kept"
    assert env[b"GREETING"] == os.fsencode("grüß dich")
    assert env[b"PYTHONPATH"] == b"/bundles/abc.zip"  # the bundle, not the worker's path
    assert env[b"PYTHONUNBUFFERED"] == b"1"
    assert all(isinstance(key, bytes) and isinstance(value, bytes) for key, value in env.items())


def test_the_steps_environment_wins_over_the_workers(monkeypatch):
    monkeypatch.setenv("STEPOP_TEST_MODE", "worker")
    env = _job_environment(_request(environment={"STEPOP_TEST_MODE": "step"}), "/b.zip")
    assert env[b"STEPOP_TEST_MODE"] == b"step"


def test_requests_compare_by_value_and_do_not_share_their_defaults():
    first, second = _request(), _request()
    assert first == second and first is not second
    first.environment["X"] = "1"
    assert second.environment == {} and first != second
    assert "job_name='job-t1'" in repr(first)
    with pytest.raises(TypeError):
        hash(first)
