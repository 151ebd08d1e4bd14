"""Azure ML's Jobs_List pages: the poller's status calls for many watched jobs (pages, not
describes), and a retry's search for the live job a lost worker left (``find_active``).

The fake is told to hold two jobs (or one) a page, as the service caps its pages at 100 and
links the next with ``nextLink``, so that a handful of jobs spans several pages. Jobs run in
the fake's timer mode (no process; tag ``stepop_fake_mode``) and one round of the real poller
(``JobPoller``) answers every watched job. The workspace is the session's: older jobs of other
tests come after these in the list (newest first).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.integration.polling import cancel, one_round

BASE = "127.0.0.1:5000/stepop-base/python:3.11-bookworm"


def _step(i: int) -> int:
    return i


@pytest.fixture
def timer_jobs(monkeypatch) -> None:
    monkeypatch.setenv("STEPOP_FAKE_TIMER_SECONDS", "600")  # running all along the test


def _submit(azure: dict[str, Any], count: int) -> tuple[Any, list[dict[str, Any]]]:
    """``count`` steps staged and submitted through the backend, in order: (backend, handles)."""
    from airflow_stepop.artifacts.storage import worker_storage
    from airflow_stepop.backends.azureml.backend import AzureMLBackend
    from airflow_stepop.backends.azureml.config import AzureMLJobConfig
    from airflow_stepop.backends.base import JobRequest
    from airflow_stepop.backends.naming import job_name, task_key
    from airflow_stepop.packaging.staging import StepIdentity, stage_step

    config = AzureMLJobConfig(
        image_uri=BASE, instance_type="Standard_DS3_v2", experiment_name="aml_poll",
        max_runtime_s=600,
        tags={"stepop_fake_mode": "timer"},
    )  # fmt: skip
    backend = AzureMLBackend(job=config)
    storage = worker_storage(None)
    run_id = f"run-{uuid.uuid4().hex[:6]}"
    handles = []
    for i in range(count):
        key = task_key("aml_poll", run_id, f"s{i}", -1)
        step = StepIdentity("aml_poll", run_id, f"s{i}", -1, 1)
        staged = stage_step(_step, [i], {}, root=azure["root"], step=step, storage=storage)
        uris = (staged.spec_uri, staged.run_uri, staged.code_uri)
        handles.append(backend.submit(JobRequest(job_name(key, 1), key, *uris)))
    return backend, handles


def test_many_watched_jobs_cost_one_list_call_a_page_and_no_describe(azure, ctl, timer_jobs):
    backend, handles = _submit(azure, 7)
    try:
        ctl.reset()
        ctl.page_size(2)  # 7 jobs: 4 pages, each reached through the last one's nextLink
        answers = one_round(backend, handles)
        assert {a.state for a in answers} <= {"pending", "running"}, answers
        assert ctl.counters() == {"Jobs_List": 4}  # none after the page with the last job
    finally:
        cancel(backend, handles)


def test_the_pages_stop_at_one_older_than_every_watched_job(azure, ctl, timer_jobs):
    from azure.core.exceptions import ResourceNotFoundError

    backend, handles = _submit(azure, 5)
    watched = handles[3:]  # the two newest; the three older ones come after them
    # three watched jobs the list does not hold (deleted or archived), as old as the oldest
    gone = [{**watched[0], "job_id": f"gone-{i}-{uuid.uuid4().hex[:6]}"} for i in range(3)]
    try:
        ctl.reset()
        ctl.page_size(1)
        answers = one_round(backend, watched + gone)
        assert {a.state for a in answers[:2]} <= {"pending", "running"}, answers
        assert all(isinstance(a, ResourceNotFoundError) for a in answers[2:]), answers
        # the two watched jobs, then one page of an older job: the rest are described
        assert ctl.counters() == {"Jobs_List": 3, "Jobs_Get": 3}
    finally:
        cancel(backend, handles)


def test_a_retry_finds_its_live_job_behind_pages_of_newer_ones(azure, ctl, timer_jobs):
    # a worker lost between submit and record: its retry must find the running job, not pay
    # for a second one, though newer jobs of the workspace (a wide mapped task) fill page 1
    backend, handles = _submit(azure, 5)
    try:
        ctl.reset()
        ctl.page_size(2)  # newest first: the oldest job is on the third page
        found = backend.find_active(handles[0]["task_key"])
        assert found is not None and found["job_id"] == handles[0]["job_id"], found
        assert ctl.counters() == {"Jobs_List": 3}  # no page past the one that holds it
    finally:
        cancel(backend, handles)
