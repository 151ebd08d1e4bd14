"""End to end on the local backend through dag.test(), with real deferral and real processes."""

from __future__ import annotations

import importlib
import json
import os
import sys

import pytest

from tests.processes import group_members
from tests.waiting import wait_for


def _dags(results_dir):
    """Import the DAG file afresh so module-level paths see this test's environment."""
    sys.modules.pop("local_step_dags", None)
    return importlib.import_module("local_step_dags")


def _xcom_rows(dag_id: str):
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(XComModel).filter(XComModel.dag_id == dag_id).all()
        return {(r.task_id, r.key, r.map_index): r.value for r in rows}


def test_a_large_array_passes_by_reference_and_a_dict_inline(results, artifact_root):
    dags = _dags(results)
    run = dags.pass_big_array().test()
    assert run.state == "success"
    seen = json.loads((results / "check.json").read_text())
    size = 50 * 2**20 // 8
    assert seen == {
        "summary": {"n": size, "sum": float(size * (size - 1) / 2)},
        "loaded_size": size,
    }

    rows = _xcom_rows("pass_big_array")
    array_row = rows[("prepare", "return_value", -1)]
    assert len(json.dumps(array_row)) < 1024  # a reference, not 50 MB
    assert "ArtifactRef" in json.dumps(array_row)
    assert rows[("summarize", "return_value", -1)] == {
        "n": size,
        "sum": float(size * (size - 1) / 2),
    }
    # the bytes live under the artifact root, laid out by dag/run/task/map_index/instance/try
    npy = list(artifact_root.glob("pass_big_array/*/prepare/-1/*/1/outputs/return_value.npy"))
    assert len(npy) == 1 and npy[0].stat().st_size > 50 * 2**20


@pytest.mark.parametrize(
    ("dag_id", "where"),
    [
        # a job's environment is stored in its definition, which the console shows
        ("secret_in_environment", "environment['DB_PASSWORD']"),
        # a step's arguments are written to object storage with its run
        ("secret_as_argument", "op_args[0]['password']"),
    ],
)
def test_a_connection_secret_is_refused_before_any_job(
    results, monkeypatch, tmp_path, dag_id, where
):
    uri = "postgresql://app:PWSECRET-stepop-7731@db.example:5432/app"
    monkeypatch.setenv("AIRFLOW_CONN_STEPOP_TEST_DB", uri)
    run = getattr(_dags(results), dag_id)().test()
    assert run.state == "failed"
    failure = (results / "failure.txt").read_text()
    assert failure.startswith("SettingsError: ")
    assert f"{where} holds a value Airflow masks as a secret" in failure
    assert "PWSECRET" not in failure
    assert not (tmp_path / "jobs").exists() or not any((tmp_path / "jobs").iterdir())


def test_a_path_returned_inside_a_dict_travels_as_its_own_artifact(results):
    run = _dags(results).returns_a_model_and_its_score().test()
    assert run.state == "success"
    seen = json.loads((results / "model.json").read_text())
    assert seen == {"model": "ArtifactRef", "loaded": "42", "score": 0.9, "weights": "42"}


def test_a_returned_path_that_does_not_exist_fails_the_step_named(results):
    """It travelled pickled before: the task succeeded with a name on a machine that is gone."""
    run = _dags(results).returns_a_missing_path().test()
    assert run.state == "failed"
    failure = (results / "failure.txt").read_text()
    assert (
        "The step returned PosixPath('model.keras') at return_value['model'], which does not "
        "exist in the job" in failure
    )
    assert "Return the path of the file or directory the step wrote" in failure


def test_a_raising_step_fails_the_task_with_the_remote_exception(results):
    run = _dags(results).step_raises().test()
    assert run.state == "failed"
    failure = (results / "failure.txt").read_text()
    assert failure.startswith("StepFailedError: ")
    assert "The step raised ValueError: bad value 42" in failure
    assert "Remote traceback" in failure and "in explode" in failure
    assert failure.count("Traceback (most recent call last)") == 1  # not again in the log tail
    assert "about to fail" in failure  # what the step printed before raising


def test_a_step_skips_or_fails_its_task_with_airflow_s_exceptions_as_a_plain_task_does(results):
    """AirflowSkipException skips the task; AirflowFailException fails it with no retry (a
    second paid job would meet the same corrupt input)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    run = _dags(results).steps_set_their_task_state().test()
    with create_session() as session:
        tis = session.query(TaskInstance).filter(TaskInstance.run_id == run.run_id).all()
        states = {ti.task_id: (ti.state, ti.try_number) for ti in tis}
    assert states == {"nothing_to_do": ("skipped", 1), "bad_data": ("failed", 1)}
    assert (results / "bad_data_tries.txt").read_text() == "try\n"  # one job


def test_a_retry_resumes_from_the_checkpoints_of_the_failed_try(results, artifact_root):
    run = _dags(results).checkpoint_resumes().test()
    assert run.state == "success"
    assert _xcom_rows("checkpoint_resumes")[("train", "return_value", -1)] == 3
    (state,) = artifact_root.glob("checkpoint_resumes/*/train/-1/*/checkpoints/epoch.txt")
    assert state.read_text() == "6"


def test_mapped_steps_run_one_job_per_element(results, tmp_path):
    run = _dags(results).mapped_steps().test()
    assert run.state == "success"
    assert (results / "total.txt").read_text() == "14"
    jobs = sorted(p.name for p in (tmp_path / "jobs").iterdir())
    assert len(jobs) == 3 and len(set(jobs)) == 3


def test_mapped_steps_keep_their_resource_settings(results):
    run = _dags(results).mapped_steps_with_resources().test()
    assert run.state == "success"
    assert (results / "mapped-total.txt").read_text() == "6"
    for index in (0, 1):
        recorded = json.loads((results / f"resources-{index}.json").read_text())
        assert recorded["cpu_count"] == 2


def test_a_mapped_task_s_results_feed_a_step(results, capfd):
    run = _dags(results).mapped_results_into_a_step().test()
    assert run.state == "success"
    assert (results / "mapped-into-step.txt").read_text() == "14"
    # the results are fetched as one slice, not item by item until a lookup fails
    out, err = capfd.readouterr()
    assert "XCom not found" not in out + err


def test_a_task_maps_over_a_step_s_list_result_larger_than_the_inline_limit(results, monkeypatch):
    """Airflow maps over a list XCom only: the list stays one, its items decided one by one."""
    monkeypatch.setenv("AIRFLOW__STEPOP__INLINE_RESULT_MAX_BYTES", "100")  # the list: ~200
    run = _dags(results).mapped_over_a_large_step_result().test()
    assert run.state == "success"
    assert (results / "mapped-over-result.txt").read_text() == "[60, 60, 60]"


def test_multiple_outputs_without_deferral(results):
    run = _dags(results).multiple_outputs_step().test()
    assert run.state == "success"
    assert (results / "split.txt").read_text() == "5 5 ArtifactRef"


def test_execution_timeout_stops_the_job(results, tmp_path):
    run = _dags(results).step_times_out().test()
    assert run.state == "failed"
    failure = (results / "failure.txt").read_text()
    assert failure.startswith("AirflowTaskTimeout")
    assert "saved my checkpoint" in failure  # printed while the job stopped
    # Every process of the job, however far it got when the deadline came (a pid the step
    # wrote itself was missing when the step started slower than the 5 s deadline): the
    # supervisor leads the job's process group, and the step runs in it.
    [job_dir] = list((tmp_path / "jobs").iterdir())
    group = json.loads((job_dir / "job.json").read_text())["pid"]
    wait_for(lambda: not group_members(group), 15, "the job's processes to end")


def test_execution_timeout_without_deferral_names_the_stopped_job(results, tmp_path):
    run = _dags(results).step_times_out_in_the_worker().test()
    assert run.state == "failed"
    failure = (results / "failure.txt").read_text()
    assert failure.startswith("AirflowTaskTimeout: Step job step-times-out-in-the-worker-sleepy-")
    assert failure.endswith("timeout: execution_timeout reached; the job was stopped")
    [job_dir] = list((tmp_path / "jobs").iterdir())
    group = json.loads((job_dir / "job.json").read_text())["pid"]
    wait_for(lambda: not group_members(group), 15, "the job's processes to end")


def test_a_job_stopped_after_a_retry_re_attached_to_it_runs_again(results, tmp_path):
    """A cleared deferred task: its next try re-attaches to the job that the cleared try's
    trigger is about to stop; it must run the step again, not fail with the stop."""
    run = _dags(results).cleared_while_deferred().test()
    assert run.state == "success"
    jobs = sorted(p.name.rsplit("-", 1)[1] for p in (tmp_path / "jobs").iterdir())
    assert jobs == ["t1", "t2"]  # try 1's job, stopped; try 2's own
    assert _xcom_rows("cleared_while_deferred")[("held", "return_value", -1)] == (
        "done by the first job"
    )


def test_a_retry_reattaches_to_the_running_job(results, tmp_path, artifact_root):
    run = _dags(results).retry_reattaches().test()
    assert run.state == "success"
    jobs = list((tmp_path / "jobs").iterdir())
    assert [p.name.rsplit("-", 1)[1] for p in jobs] == ["t1"]  # one job, from try 1, no second
    rows = _xcom_rows("retry_reattaches")
    assert rows[("held", "return_value", -1)] == "done by the first job"
    assert list(artifact_root.glob("retry_reattaches/*/held/-1/*/1/result.json"))
    assert not list(artifact_root.glob("retry_reattaches/*/held/-1/*/2/spec.json"))


@pytest.mark.container
def test_a_step_runs_in_a_container_of_its_environment_image(results, monkeypatch, tmp_path):
    docker = pytest.importorskip("docker")
    image = os.environ.get("STEPOP_TEST_BASE_IMAGE", "stepop-base/python:3.11-bookworm")
    try:
        docker.from_env(timeout=30).images.get(image)
    except Exception as exc:
        pytest.skip(f"no container engine with {image} ({exc}); run scripts/engine.sh up")
    monkeypatch.setenv("AIRFLOW__STEPOP__BUILD_NETWORK_MODE", "host")
    client = docker.from_env(timeout=30)
    run = _dags(results).container_step().test()
    assert run.state == "success"
    jobs = [p.name for p in (tmp_path / "jobs").iterdir()]
    assert any(name.startswith("container-step-inspect-") for name in jobs)
    leftovers = [c.name for c in client.containers.list(all=True) if c.name in jobs]
    assert leftovers == []  # each container was removed once its task had the result
    seen = json.loads((results / "container.json").read_text())
    size = 2**20 // 8
    assert seen == {
        "in_container": True,
        "flavor": "container",
        "home": "/tmp/step-home",
        "python": "/usr/bin/python3",  # the image's interpreter, not the worker's
        "sum": float(size * (size - 1) / 2),
    }


def test_what_a_plain_task_takes_a_step_takes(results):
    """Each failed before, after its job was submitted or had run: an environment value a
    native template rendered to an int; an ``async def`` step; a ``functools.partial`` and a
    callable instance; ``multiple_outputs=True`` returning None; parameters named like context
    values (``ds``, ``params``, ``logical_date``), which stayed None; a small
    tuple, which came back as an ArtifactRef; ``op_kwargs=`` an upstream output and ``op_args=``
    a template, which were refused at parse; a dict's key order, which was sorted both ways."""
    run = _dags(results).plain_task_idioms().test()
    assert run.state == "success"
    day = run.logical_date.date().isoformat()
    dated = [day, 9, day, ["datetime", "str"], []]  # **hp stays the step's own
    pair = ["tuple", 3, "a"]
    recorded = json.loads((results / "idioms.json").read_text())
    ordered = [["rows", "mean", "layers"], ["conv", "bn"], ["seen", "z", "a"]]
    assert recorded == ["9", 2, 15, 20, dated, pair, 10, 12, ordered]
    assert ("nothing", "return_value", -1) not in _xcom_rows("plain_task_idioms")
