"""The Vertex poller's status calls for many watched jobs: ListCustomJobs pages, not describes.

The fake is told to hold two jobs (or one) a page, as the service caps ``pageSize``, so that a
handful of jobs spans more pages than the old five-page limit. Jobs run in the fake's timer mode
(no process; label ``stepop_fake_mode``), each test in a project of its own so that the list
holds only its jobs, and one round of the real poller (``JobPoller``) answers every watched job.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import pytest

from tests.integration.polling import cancel, one_round

BASE = "127.0.0.1:5000/stepop-base/python:3.11-bookworm"


def _step(i: int) -> int:
    return i


@pytest.fixture
def project(gcp, monkeypatch) -> str:
    """A project of the test's own on the fake (it keeps jobs per project); jobs run minutes."""
    name = f"stepop-poll-{uuid.uuid4().hex[:6]}"
    connection = json.loads(os.environ["AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT"])
    connection["extra"]["project"] = name
    monkeypatch.setenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", json.dumps(connection))
    monkeypatch.setenv("STEPOP_FAKE_TIMER_SECONDS", "600")  # running all along the test
    return name


def _submit(gcp: dict[str, Any], count: int) -> tuple[Any, list[dict[str, Any]]]:
    """``count`` steps staged and submitted through the backend, in order: (backend, handles)."""
    from airflow_stepop.artifacts.storage import worker_storage
    from airflow_stepop.backends.base import JobRequest
    from airflow_stepop.backends.naming import job_name, task_key
    from airflow_stepop.backends.vertex.backend import VertexBackend
    from airflow_stepop.backends.vertex.config import VertexJobConfig
    from airflow_stepop.packaging.staging import StepIdentity, stage_step

    config = VertexJobConfig(
        machine_type="n1-standard-4", image_uri=BASE, labels={"stepop_fake_mode": "timer"}
    )
    backend = VertexBackend(job=config)
    storage = worker_storage("google_cloud_default")
    run_id = f"run-{uuid.uuid4().hex[:6]}"
    handles = []
    for i in range(count):
        key = task_key("vx_poll", run_id, f"s{i}", -1)
        step = StepIdentity("vx_poll", run_id, f"s{i}", -1, 1)
        staged = stage_step(_step, [i], {}, root=gcp["root"], step=step, storage=storage)
        uris = (staged.spec_uri, staged.run_uri, staged.code_uri)
        handles.append(backend.submit(JobRequest(job_name(key, 1), key, *uris)))
    return backend, handles


def test_many_watched_jobs_cost_one_list_call_a_page_and_no_describe(gcp, ctl, project):
    backend, handles = _submit(gcp, 11)
    try:
        ctl.reset()
        ctl.page_size(2)  # 11 jobs: 6 pages, more than the five the poller used to read
        answers = one_round(backend, handles)
        assert {a.state for a in answers} <= {"pending", "running"}, answers
        assert ctl.counters() == {"ListCustomJobs": 6}  # no page after the last job's
    finally:
        cancel(backend, handles)


def test_a_job_behind_other_jobs_pages_is_described_not_searched_for(gcp, ctl, project):
    backend, handles = _submit(gcp, 5)
    watched = handles[:1]  # the oldest: the four newer ones come first, a page each
    try:
        ctl.reset()
        ctl.page_size(1)
        (answer,) = one_round(backend, watched)
        assert answer.state in ("pending", "running")
        # a page that answered no watched job, as many as are missing: one describe instead
        assert ctl.counters() == {"ListCustomJobs": 1, "GetCustomJob": 1}
    finally:
        cancel(backend, handles)
