"""Steps whose trigger ends the task itself, under Airflow's own processes (api-server,
scheduler with the LocalExecutor, dag-processor, triggerer) on a private PostgreSQL.

A step's trigger verifies the job's result, pushes its XComs through Airflow's XCom backend and
ends the task (``TaskSuccessEvent``/``TaskFailedEvent``): no second task process, no hold past
Airflow 3.3's resume race (apache/airflow#67287), whose hold once made every quick step wait
10 s. The four DAGs of tests/e2e/trigger_end_dags run at once, as a user triggers them through
the REST API; then, per story, what the user sees: task states, the values downstream tasks got
and each task's log.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cloud.pytest_plugin import cloud_stack, registry_image  # noqa: F401 - the fixtures
from tests.e2e.services import Api, airflow_deployment
from tests.waiting import wait_for

DAGS = Path(__file__).parent / "trigger_end_dags"
QUICK_STEPS = 100  # trigger_end_dags.QUICK_STEPS
KUBERNETES_STEPS = 20  # trigger_end_dags.KUBERNETES_STEPS
DAG_IDS = (
    "quick_steps_at_once",
    "kubernetes_steps_at_once",
    "results_from_the_trigger",
    "failures_from_the_trigger",
    "resumes_for_its_callback",
    "failure_callbacks",
)
RUN_TIMEOUT = 600


@pytest.fixture(scope="module")
def runs(
    cloud_stack: dict[str, str],  # noqa: F811 - a fixture
    registry_image: str,  # noqa: F811 - a fixture
) -> Iterator[tuple[dict[str, dict[str, Any]], Api, Path, Path]]:
    """Each DAG's finished run (its task instances by task and map index), the API, the
    AIRFLOW_HOME and the directory where the DAGs' plain tasks wrote what they got."""
    base = Path(tempfile.mkdtemp(prefix="stepop-trigger-end-"))
    base.chmod(0o755)  # the PostgreSQL server runs as `postgres` when we are root
    results = base / "results"
    results.mkdir()
    env = {**cloud_stack, "STEPOP_TEST_RESULTS": str(results),
           "AIRFLOW__STEPOP__POLL_INTERVAL": "0.5",
           "AIRFLOW__STEPOP__KUBERNETES_ARTIFACT_ROOT":
               f"s3://{cloud_stack['STEPOP_DEMO_BUCKET']}/trigger-end-{base.name}"}  # fmt: skip
    try:
        with airflow_deployment(base, DAGS, env) as (api, home):
            wait_for(lambda: all(_dag_ready(api, d) for d in DAG_IDS), 180, "the DAGs to load",
                     tolerate=(OSError,), interval=0.5)  # fmt: skip
            run_ids = {}
            for dag_id in DAG_IDS:
                api.patch(f"/api/v2/dags/{dag_id}", {"is_paused": False})
                body = {"logical_date": None}
                run_ids[dag_id] = api.post(f"/api/v2/dags/{dag_id}/dagRuns", body)["dag_run_id"]
            seen = {}
            for dag_id, run_id in run_ids.items():
                path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}"
                state = wait_for(
                    lambda path=path: api.get(path)["state"] in ("success", "failed")
                    and api.get(path)["state"],
                    RUN_TIMEOUT, f"the run of {dag_id} to end", tolerate=(OSError,), interval=1,
                )  # fmt: skip
                tis = _task_instances(api, path)
                by_task = {(t["task_id"], t["map_index"]): t for t in tis}
                seen[dag_id] = {"state": state, "run_id": run_id, "tis": by_task}
            yield seen, api, home, results
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _task_instances(api: Api, run_path: str) -> list[dict[str, Any]]:
    """Every task instance of the run: the API answers 100 at most a page."""
    tis: list[dict[str, Any]] = []
    while True:
        page = api.get(f"{run_path}/taskInstances?limit=100&offset={len(tis)}")
        tis += page["task_instances"]
        if len(tis) >= page["total_entries"] or not page["task_instances"]:
            return tis


def _dag_ready(api: Api, dag_id: str) -> bool:
    try:
        return bool(api.get(f"/api/v2/dags/{dag_id}"))
    except Exception:
        return False


def _logs(home: Path, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> dict:
    """The task's log files by try: the worker's (``worker``) and its triggers' (``trigger``)."""
    where = home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
    if map_index >= 0:
        where = where / f"map_index={map_index}"
    logs: dict[int, dict[str, str]] = {}
    for path in sorted(where.glob("attempt=*.log*")):
        attempt = int(path.name.split("=")[1].split(".")[0])
        kind = "trigger" if ".trigger." in path.name else "worker"
        logs.setdefault(attempt, {}).setdefault(kind, "")
        logs[attempt][kind] += path.read_text()
    return logs


def test_a_hundred_quick_steps_at_once_end_from_the_trigger_without_a_hold(runs):
    """Issue 44's "done when": 100 quick steps mapped at once, none fails, no event is held,
    each task's log shows the job's lines and its result, and the values a downstream task
    gets are the steps' own (ints, not their JSON text)."""
    seen, _, home, results = runs
    run = seen["quick_steps_at_once"]
    steps = {i: ti for (task, i), ti in run["tis"].items() if task == "quick"}
    assert len(steps) == QUICK_STEPS
    assert {ti["state"] for ti in steps.values()} == {"success"}, steps
    assert {ti["try_number"] for ti in steps.values()} == {1}
    assert run["state"] == "success"
    assert json.loads((results / "total.json").read_text()) == {
        "types": ["int"], "sum": sum(range(QUICK_STEPS)), "count": QUICK_STEPS,
    }  # fmt: skip
    for i in range(QUICK_STEPS):
        logs = _logs(home, "quick_steps_at_once", run["run_id"], "quick", i)[1]
        assert f"quick step {i} ran" in logs["trigger"]
        assert f"succeeded; result: {i}" in logs["trigger"]
        assert "The task resumes in" not in logs["trigger"]  # no hold
        # one task process: the worker deferred and never resumed to read the result
        assert "succeeded; result" not in logs["worker"]


def test_kubernetes_steps_at_once_run_as_jobs_and_end_from_the_trigger(runs):
    """Kubernetes steps under Airflow's own processes: each a Job on the emulated cluster,
    its pod's lines and its result in the task's trigger log, the values downstream the
    steps' own."""
    seen, _, home, results = runs
    run = seen["kubernetes_steps_at_once"]
    steps = {i: ti for (task, i), ti in run["tis"].items() if task == "on_the_cluster"}
    assert {ti["state"] for ti in steps.values()} == {"success"}, steps
    assert len(steps) == KUBERNETES_STEPS and run["state"] == "success"
    squares = [i * i for i in range(KUBERNETES_STEPS)]
    assert json.loads((results / "squares.json").read_text()) == squares
    for i in range(KUBERNETES_STEPS):
        logs = _logs(home, "kubernetes_steps_at_once", run["run_id"], "on_the_cluster", i)[1]
        assert f"kubernetes step {i} ran" in logs["trigger"]
        assert f"succeeded; result: {i * i}" in logs["trigger"]
        assert "X-Amz-Signature" not in logs["trigger"] + logs["worker"]


def test_multiple_outputs_and_a_task_mapped_over_a_steps_list_come_from_the_trigger(runs):
    seen, _, home, results = runs
    run = seen["results_from_the_trigger"]
    assert run["state"] == "success", run["tis"]
    assert json.loads((results / "checked.json").read_text()) == {
        "count": 2, "names": ["a", "b"], "squares": [1, 4, 9],
    }  # fmt: skip
    for task in ("split", "listed"):
        logs = _logs(home, "results_from_the_trigger", run["run_id"], task)[1]
        assert "succeeded; result" in logs["trigger"] and "succeeded" not in logs["worker"]


def test_a_failure_ended_from_the_trigger_is_retried_and_a_skip_skips(runs):
    """The raising step's first try fails from the trigger, with the remote exception in its
    log; Airflow retries it and the second try succeeds. A step raising
    AirflowSkipException is skipped."""
    seen, _, home, _ = runs
    run = seen["failures_from_the_trigger"]
    flaky, skipper = run["tis"][("flaky", -1)], run["tis"][("skipper", -1)]
    assert (flaky["state"], flaky["try_number"]) == ("success", 2), flaky
    assert skipper["state"] == "skipped", skipper
    logs = _logs(home, "failures_from_the_trigger", run["run_id"], "flaky")
    assert "ValueError: the first try fails on purpose" in logs[1]["trigger"]
    assert "Remote traceback" in logs[1]["trigger"]
    assert "succeeded; result: 'the second try'" in logs[2]["trigger"]
    skipped = _logs(home, "failures_from_the_trigger", run["run_id"], "skipper")[1]
    assert "nothing to do today" in skipped["trigger"]


def test_a_step_with_a_success_callback_resumes_in_a_worker_which_runs_it(runs):
    seen, api, home, results = runs
    run = seen["resumes_for_its_callback"]
    assert run["state"] == "success"
    assert json.loads((results / "callback.json").read_text()) == {"task": "seven"}
    logs = _logs(home, "resumes_for_its_callback", run["run_id"], "seven")[1]
    assert "succeeded; result: 7" in logs["worker"]
    xcom = api.get(
        f"/api/v2/dags/resumes_for_its_callback/dagRuns/{run['run_id']}/taskInstances/seven/"
        "xcomEntries/return_value"
    )
    assert xcom["value"] == 7


def test_a_failure_callback_keeps_the_worker_for_a_failure_only(runs):
    """The failing step resumes in a worker, which fails it and runs the callback with the
    step's error; the step that succeeds ends from its trigger."""
    seen, _, home, results = runs
    run = seen["failure_callbacks"]
    assert run["tis"][("fine", -1)]["state"] == "success"
    assert run["tis"][("broken", -1)]["state"] == "failed"
    fine = _logs(home, "failure_callbacks", run["run_id"], "fine")[1]
    assert "succeeded; result: 1" in fine["trigger"] and "succeeded" not in fine["worker"]
    failure = json.loads((results / "failure-broken.json").read_text())
    assert failure.startswith("StepFailedError: Step job ") and "broken on purpose" in failure
