"""A job belongs to one try of one task instance: a re-created run's try never takes another's.

The task state store is Airflow's (deleted with its DAG run, kept across retries and clears);
here a dict with its two calls stands in for it, as the earlier-try tests do.
"""

from __future__ import annotations

import json
import uuid
from types import SimpleNamespace

import pytest

from airflow_stepop import LocalStepOperator
from airflow_stepop.backends.base import JobNameTakenError, JobRequest
from airflow_stepop.backends.local.backend import JOB_RECORD, LocalBackend
from airflow_stepop.backends.naming import job_name
from airflow_stepop.operators.task_identity import INSTANCE_KEY, submit_as_own, task_identity
from airflow_stepop.packaging.staging import StepIdentity, stage_step
from airflow_stepop.runtime.storage import Storage
from tests.waiting import wait_for


class StateStore(dict):
    """The two calls of Airflow's task state store that the operator makes."""

    def set(self, key, value, **kwargs):
        self[key] = value


def _context(store, try_number=1, ti_id=None):
    ti = SimpleNamespace(
        dag_id="dag", run_id="backfill_2026", task_id="train", map_index=-1,
        try_number=try_number, id=ti_id or uuid.uuid4(),
    )  # fmt: skip
    return {"ti": ti, "task_state_store": store}


def test_the_tries_of_one_run_share_an_identity_that_a_recreated_run_does_not():
    store = StateStore()
    first = task_identity(_context(store))
    retry = task_identity(_context(store, try_number=2))
    assert store[INSTANCE_KEY] == first.instance and retry.key == first.key
    assert retry.try_id != first.try_id  # Airflow gives every try an id of its own

    recreated = task_identity(_context(StateStore()))  # deleted with the run: a new store
    assert recreated.key != first.key
    assert job_name(recreated.key, 1) != job_name(first.key, 1)


def test_without_a_state_store_the_names_are_those_of_dag_run_task_and_map_index():
    identity = task_identity(_context(None))
    assert identity.key == "dag/backfill_2026/train/-1" and identity.instance == ""


def _request(tmp_path, try_id: str, instance: str = "") -> JobRequest:
    staged = stage_step(
        len, ["four"], {}, root=f"file://{tmp_path}/root", storage=Storage(),
        step=StepIdentity("dag", "run", "step", -1, 1, instance),
    )  # fmt: skip
    key = "dag/run/step/-1"
    return JobRequest(
        job_name(key, 1), key, staged.spec_uri, staged.run_uri, staged.code_uri,
        spec_sha256=staged.spec_sha256, code_sha256=staged.code_sha256, try_id=try_id,
    )  # fmt: skip


def test_a_job_of_the_name_that_another_try_started_is_never_attached_to(tmp_path):
    backend = LocalBackend(jobs_dir=str(tmp_path / "jobs"))
    old = backend.submit(_request(tmp_path, try_id="try-of-the-deleted-run", instance="a"))
    wait_for(lambda: backend._status(old).terminal, 60, "the first job to end")

    with pytest.raises(JobNameTakenError) as taken:
        backend.submit(_request(tmp_path, try_id="try-of-the-new-run", instance="b"))
    assert taken.value.owner == "try-of-the-deleted-run"
    # this try's own job (a submit retried after its answer was lost) is attached to
    again = backend.submit(_request(tmp_path, try_id="try-of-the-deleted-run", instance="a"))
    assert again == old
    record = json.loads((tmp_path / "jobs" / old["job_id"] / JOB_RECORD).read_text())
    assert record["try_id"] == "try-of-the-deleted-run"


def test_the_operator_submits_under_another_name_when_another_try_holds_its_own(tmp_path, capfd):
    backend = LocalBackend(jobs_dir=str(tmp_path / "jobs"))
    old = backend.submit(_request(tmp_path, try_id="0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"))
    wait_for(lambda: backend._status(old).terminal, 60, "the first job to end")
    request = _request(tmp_path, try_id="0190a1b2-c3d4-7e5f-8a9b-ffffffaa1234", instance="b")
    operator = LocalStepOperator(task_id="step", python_callable=len, op_args=["four"])
    handle = submit_as_own(backend, request, 1, operator.log)
    assert handle["job_id"] == f"{request.job_name}-aa1234" != old["job_id"]
    said = "".join(capfd.readouterr())  # the task log
    assert f"A job named {request.job_name} exists already and belongs to another try" in said
    assert f"submitting this try's job as {handle['job_id']}" in said
    wait_for(lambda: backend._status(handle).terminal, 60, "the renamed job to end")
    assert backend._status(handle).state == "succeeded"


@pytest.mark.parametrize("run_id", ["..", ".", "..."])
def test_a_run_id_of_dots_is_no_path_segment_that_leaves_its_run(tmp_path, run_id):
    """Airflow's run_id pattern allows '.', so a run named '..' once staged its step beside
    another DAG's runs (fsspec and the file system read it as the parent directory)."""
    from airflow_stepop.packaging.staging import run_uri_for

    uri = run_uri_for(f"file://{tmp_path}/root", StepIdentity("dag", run_id, "t", -1, 1, "ab"))
    assert uri == f"file://{tmp_path}/root/dag/{'_' * len(run_id)}/t/-1/ab/1"
