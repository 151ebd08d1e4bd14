"""Faults that used to cost a second billed job or leave one running: dag.test(), local backend."""

from __future__ import annotations

import importlib
import json
import sys


def _dags():
    sys.modules.pop("fault_dags", None)
    return importlib.import_module("fault_dags")


def test_a_retry_after_the_job_succeeded_returns_its_result_without_a_second_job(
    results, tmp_path, artifact_root
):
    run = _dags().retry_after_success_reuses_result().test()
    assert run.state == "success"
    assert (results / "runs.txt").read_text() == "ran\n"  # the step ran once
    assert [p.name.rsplit("-", 1)[1] for p in (tmp_path / "jobs").iterdir()] == ["t1"]
    assert not list(artifact_root.glob("retry_after_success_reuses_result/*/*/-1/*/2/spec.json"))
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(XComModel)
            .filter_by(dag_id="retry_after_success_reuses_result", key="return_value")
            .one()
        )
    assert row.value == "computed once"


def test_a_failure_after_submit_with_no_retry_left_stops_the_job(results, tmp_path):
    from airflow_stepop.backends.local.backend import LocalBackend

    run = _dags().failure_after_submit_without_retry().test()
    assert run.state == "failed"
    [job_dir] = list((tmp_path / "jobs").iterdir())
    handle = json.loads((job_dir / "job.json").read_text())
    assert LocalBackend(str(tmp_path / "jobs")).status(handle).state == "stopped"


def test_a_job_nobody_can_follow_is_left_to_the_retry_then_stopped_never_run_twice(
    results, tmp_path
):
    """The service refuses status calls (credentials revoked, say): try 1's trigger cannot
    follow the job and leaves it to the retry; the retry cannot look it up either, fails
    rather than submit a second job, and, the last try, stops it. Before, the trigger raised
    and the task failed with its job running on, and a retry submitted a second job."""
    from airflow_stepop.backends.local.backend import LocalBackend

    run = _dags().unwatchable_job().test()
    assert run.state == "failed"
    [job_dir] = list((tmp_path / "jobs").iterdir())  # no second job
    handle = json.loads((job_dir / "job.json").read_text())
    assert LocalBackend(str(tmp_path / "jobs")).status(handle).state == "stopped"
