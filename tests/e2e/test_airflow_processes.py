"""End to end with real Airflow processes: `airflow dags test`, and a full standalone stack."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doc_blocks import python_block
from tests.e2e.services import Api
from tests.processes import process_alive
from tests.waiting import free_port, wait_for

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        PATH=f"{BIN}:{env.get('PATH', '')}",
        **extra,
    )
    return env


def test_example_dag_under_airflow_dags_test(tmp_path):
    """The example DAG, run by the CLI a user would use: references in XCom, values inline."""
    home = tmp_path / "home"
    env = _env(home, AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags_examples"))
    subprocess.run(["airflow", "db", "migrate"], env=env, check=True, capture_output=True)
    result = subprocess.run(
        ["airflow", "dags", "test", "stepop_train_pipeline"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "state=success" in result.stdout + result.stderr, result.stdout[-3000:]

    import sqlite3

    with sqlite3.connect(home / "airflow.db") as db:
        rows = db.execute("SELECT task_id, key, value FROM xcom").fetchall()
    xcoms = {(task, key): value for task, key, value in rows}
    train_set = xcoms[("prepare", "train")]
    assert len(train_set) < 1024 and "ArtifactRef" in train_set
    metrics = json.loads(xcoms[("evaluate", "return_value")])
    assert metrics["accuracy"] > 0.8 and metrics["trained_on"] in ("numpy", "cuda")
    npy = next(
        (home / "stepop-artifacts").glob("stepop_train_pipeline/*/prepare/-1/*/1/outputs/train.npy")
    )
    assert npy.stat().st_size > 50 * 10**6


def test_the_readme_quick_start_runs_as_written_and_its_unit_test_passes(tmp_path):
    """The README's first DAG, saved as it says ($AIRFLOW_HOME/dags/pipeline.py) and run with
    the two commands it names; then the README's unit test of a step, with pytest."""
    home = tmp_path / "home"
    dags = home / "dags"
    dags.mkdir(parents=True)
    (dags / "pipeline.py").write_text(python_block("README.md", "def pipeline():"))
    env = _env(home)
    subprocess.run(["airflow", "db", "migrate"], env=env, check=True, capture_output=True)
    result = subprocess.run(
        ["airflow", "dags", "test", "pipeline"], env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert "state=success" in output, output[-3000:]
    assert "{'rows': 1000000, 'mean': " in output and "(1000000, 32)" in output  # report's print
    assert "does not reserve or check" in output  # the warning the README says prepare logs

    (tmp_path / "test_pipeline.py").write_text(python_block("README.md", "def test_summarize"))
    env["PYTHONPATH"] = str(dags)  # "run pytest with your DAGs folder on PYTHONPATH"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_pipeline.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout[-3000:]


def wait_for_ok(what: str, check, timeout: float):
    """Poll a check of the Airflow stack; errors while it starts count as "not yet"."""
    return wait_for(check, timeout, what, tolerate=(Exception,), interval=0.5)


@pytest.fixture(scope="module")
def airflow_stack(tmp_path_factory):
    """`airflow standalone` (scheduler, triggerer, dag processor, API server) on loopback."""
    home = tmp_path_factory.mktemp("standalone")
    results = home / "results"
    results.mkdir()
    port = free_port()
    env = _env(
        home,
        AIRFLOW__CORE__DAGS_FOLDER=str(Path(__file__).parent / "dags"),
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True",
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
        AIRFLOW__STEPOP__POLL_INTERVAL="0.5",
        STEPOP_TEST_RESULTS=str(results),
    )
    log = open(home / "standalone.log", "wb")  # noqa: SIM115 - open for the stack's lifetime
    process = subprocess.Popen(
        ["airflow", "standalone"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        api = wait_for_ok("the API server", lambda: Api(f"http://127.0.0.1:{port}"), 180)
        wait_for_ok(
            "the triggerer and the DAGs",
            lambda: (
                api.get("/api/v2/monitor/health")["triggerer"]["status"] == "healthy"
                and api.get("/api/v2/dags/held_until_killed")
            ),
            180,
        )
        yield api, home
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()


def test_marking_a_deferred_task_failed_stops_its_job(airflow_stack):
    api, home = airflow_stack
    results = home / "results"
    dag = "held_until_killed"
    api.patch(f"/api/v2/dags/{dag}", {"is_paused": False})
    run_id = api.post(f"/api/v2/dags/{dag}/dagRuns", {"logical_date": None})["dag_run_id"]
    ti_path = f"/api/v2/dags/{dag}/dagRuns/{run_id}/taskInstances/hold"
    pid_file = results / "held-until-killed.pid"
    wait_for_ok("the task to defer", lambda: api.get(ti_path)["state"] == "deferred", 120)
    wait_for_ok("the step process", pid_file.exists, 60)
    logs = home / "logs"
    wait_for_ok(
        "the triggerer to run the trigger",
        lambda: any("Waiting for job" in p.read_text() for p in logs.rglob("*trigger*")),
        120,
    )
    pid = int(pid_file.read_text())
    assert process_alive(pid)

    api.patch(ti_path, {"new_state": "failed"})

    wait_for_ok("the step process to be stopped", lambda: not process_alive(pid), 60)
    assert api.get(ti_path)["state"] == "failed"
    # what the step printed while it stopped, relayed by on_kill into the task's log
    wait_for_ok(
        "the step's last line in the task log",
        lambda: any(
            "saving its work before it stops" in p.read_text()
            for p in (logs / f"dag_id={dag}").rglob("*.log")
        ),
        60,
    )


def _trigger_and_kill_on_the_way_to_the_defer(api, home, dag: str) -> str:
    """Trigger ``dag``, and mark its task failed while ``execute()`` submits (see
    fault_operators.KilledWhileSubmitting); returns the task's log path prefix."""
    api.patch(f"/api/v2/dags/{dag}", {"is_paused": False})
    run_id = api.post(f"/api/v2/dags/{dag}/dagRuns", {"logical_date": None})["dag_run_id"]
    ti_path = f"/api/v2/dags/{dag}/dagRuns/{run_id}/taskInstances/hold"
    wait_for_ok(
        "execute() to reach the submit", (home / "results" / f"{dag}.submitting").exists, 120
    )
    api.patch(ti_path, {"new_state": "failed"})
    return ti_path


def test_a_task_killed_while_its_job_is_submitted_stops_that_job(airflow_stack):
    """Airflow lets execute() go on after the SIGTERM of a user's mark: the job whose submit
    was on its way must not run on with nobody watching it."""
    api, home = airflow_stack
    pid_file = home / "results" / "killed-while-submitting.pid"
    ti_path = _trigger_and_kill_on_the_way_to_the_defer(api, home, "killed_while_submitting")
    wait_for_ok("the step process", pid_file.exists, 60)
    pid = int(pid_file.read_text())

    wait_for_ok("the step process to be stopped", lambda: not process_alive(pid), 60)
    assert api.get(ti_path)["state"] == "failed"


def test_a_task_killed_before_its_submit_submits_no_job(airflow_stack):
    api, home = airflow_stack
    dag = "killed_before_submit"
    _trigger_and_kill_on_the_way_to_the_defer(api, home, dag)
    logs = home / "logs" / f"dag_id={dag}"
    wait_for_ok(
        "the task to end",
        lambda: any(
            "killed before its job was submitted" in p.read_text() for p in logs.rglob("*.log")
        ),
        60,
    )
    assert not (home / "results" / "killed-before-submit.pid").exists()
    assert not any("Submitted job" in p.read_text() for p in logs.rglob("*.log"))


def test_a_task_marked_failed_before_it_defers_stops_its_job(airflow_stack):
    """The mark reaches the task process as SIGTERM only at its next heartbeat; before that,
    the server refuses the deferral and the process exits without on_kill."""
    api, home = airflow_stack
    dag = "marked_before_defer"
    pid_file = home / "results" / "marked-before-defer.pid"
    _trigger_and_kill_on_the_way_to_the_defer(api, home, dag)
    (home / "results" / f"{dag}.marked").touch()  # the task goes on to its deferral now

    # The job may be stopped before its step has started (then no pid is ever written): what
    # counts is that the job ends stopped, and that a step that had started is gone.
    from airflow_stepop.backends.local.backend import LocalBackend

    jobs = LocalBackend(str(home / "stepop-jobs"))

    def job_state() -> str:
        [job_dir] = (home / "stepop-jobs").glob("marked-before-defer-*")
        return jobs.status(json.loads((job_dir / "job.json").read_text())).state

    wait_for_ok("the job to be stopped", lambda: job_state() == "stopped", 60)
    if pid_file.exists():
        pid = int(pid_file.read_text())
        wait_for_ok("the step process to be stopped", lambda: not process_alive(pid), 60)
