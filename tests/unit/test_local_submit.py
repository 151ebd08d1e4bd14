"""What the local backend hands a job's process, and the request it is made from."""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path

import pytest

from airflow_stepop import ResourceSettings
from airflow_stepop.backends.base import JobRequest
from airflow_stepop.backends.local.process import job_environment
from tests.waiting import wait_for

SCRATCH = Path("/jobs/job-t1/tmp")


def _request(**kwargs):
    return JobRequest(
        "job-t1", "dag/run/task/-1", "file:///r/spec.json", "file:///r", "file:///c.zip", **kwargs
    )


def test_the_job_gets_the_workers_environment_without_airflows_own_plus_the_steps(monkeypatch):
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", "secret")
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", "postgres://user:password@host/db")
    monkeypatch.setenv("STEPOP_TEST_KEPT", "kept")
    monkeypatch.setenv("PYTHONPATH", "/the/workers/path")

    monkeypatch.setenv("STEPOP_MAX_RUNTIME_S", "5")  # e.g. a worker that runs in a step

    request = _request(environment={"GREETING": "grüß dich"})
    env = job_environment(request, "/ckpt", None, SCRATCH)

    assert not [key for key in env if key.startswith(b"AIRFLOW")]
    assert env[b"STEPOP_TEST_KEPT"] == b"kept"
    assert env[b"GREETING"] == os.fsencode("grüß dich")
    # not the worker's path: the bootstrap puts the checked bundle in front of the step's own
    assert b"PYTHONPATH" not in env
    assert env[b"PYTHONUNBUFFERED"] == b"1"
    assert env[b"STEPOP_CHECKPOINT_DIR"] == b"/ckpt"
    assert env[b"TMPDIR"] == b"/jobs/job-t1/tmp"  # removed by the supervisor when it ends
    cache = Path(os.fsdecode(env[b"STEPOP_CACHE_DIR"]))  # extracted code: private to this user
    assert cache.stat().st_mode & 0o777 == 0o700 and cache.stat().st_uid == os.getuid()
    assert all(isinstance(key, bytes) and isinstance(value, bytes) for key, value in env.items())
    assert b"STEPOP_MAX_RUNTIME_S" not in env  # no limit: none inherited either
    assert job_environment(request, "/ckpt", 900, SCRATCH)[b"STEPOP_MAX_RUNTIME_S"] == b"900"


def test_the_steps_own_pythonpath_is_kept(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/the/workers/path")
    request = _request(environment={"PYTHONPATH": f"/opt/lib{os.pathsep}/opt/more"})
    env = job_environment(request, "/ckpt", None, SCRATCH)
    assert env[b"PYTHONPATH"] == os.fsencode(f"/opt/lib{os.pathsep}/opt/more")


def test_the_steps_environment_wins_over_the_workers(monkeypatch):
    monkeypatch.setenv("STEPOP_TEST_MODE", "worker")
    request = _request(environment={"STEPOP_TEST_MODE": "step"})
    env = job_environment(request, "/ckpt", None, SCRATCH)
    assert env[b"STEPOP_TEST_MODE"] == b"step"


def test_requests_compare_by_value_and_do_not_share_their_defaults():
    first, second = _request(), _request()
    assert first == second and first is not second
    first.environment["X"] = "1"
    assert second.environment == {} and first != second
    assert "job_name='job-t1'" in repr(first)
    with pytest.raises(TypeError):
        hash(first)


@pytest.fixture
def staged_len(tmp_path):
    """A staged step (len of a string) under a file:// root, and a backend for it."""
    from airflow_stepop.backends.local.backend import LocalBackend
    from airflow_stepop.packaging.staging import StepIdentity, stage_step
    from airflow_stepop.runtime.storage import Storage

    staged = stage_step(
        len,
        ["four"],
        {},
        root=f"file://{tmp_path}/root",
        step=StepIdentity("dag", f"run-{uuid.uuid4().hex[:8]}", "gpu_step", -1, 1),
        storage=Storage(),
    )
    return staged, LocalBackend(jobs_dir=str(tmp_path / "jobs"))


def _submit_process(staged, backend, resources):
    from airflow_stepop.backends.naming import job_name, task_key

    key = task_key("dag", "run", "gpu_step", -1)
    request = JobRequest(
        job_name(key, 1), key, staged.spec_uri, staged.run_uri, staged.code_uri, resources
    )
    handle = backend.submit(request)
    wait_for(lambda: backend._status(handle).terminal, 120, "the step process to end")
    assert backend._status(handle).state == "succeeded"  # it ran, GPU or not
    return handle


def test_process_mode_says_it_reserves_no_gpu(staged_len, caplog):
    staged, backend = staged_len
    with caplog.at_level(logging.WARNING, logger="airflow_stepop.backends.local.backend"):
        handle = _submit_process(
            staged, backend, ResourceSettings(gpu_count=1, cpu_count=2, memory="2GiB")
        )
    assert handle["mode"] == "process"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "Process mode does not reserve or check resources" in warnings[0]
    assert "ResourceSettings(cpu_count=2, gpu_count=1, memory='2GiB') is not applied" in warnings[0]
    assert "NVIDIA Container Toolkit" in warnings[0]


def test_process_mode_says_nothing_without_resources(staged_len, caplog):
    staged, backend = staged_len
    with caplog.at_level(logging.WARNING, logger="airflow_stepop.backends.local.backend"):
        _submit_process(staged, backend, None)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
