"""Every benchmark of ``bench/`` still runs: each script's ``--quick`` mode, in its own process.

A benchmark is run by hand, rarely; when the code under it changes, it breaks unseen (one once
stopped before measuring anything: the operator it built no longer passed the argument checks).
Each case runs one script as a user does (``python bench/<script>.py --quick`` from the
repository root, in a private AIRFLOW_HOME, with the emulated clouds' env for those that call
them) and asserts only that it exits 0 and prints its summary lines: their fixed text, never a
figure (a quick run's figures are noise, and a benchmark's target is no test's business).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from cloud.pytest_plugin import cloud_stack, registry_image  # noqa: F401 - the fixtures

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 240  # seconds per script; a quick run takes 1-45 s here
PARALLEL = 3  # scripts run at a time


@dataclass(frozen=True)
class Script:
    summary: list[str]  # regular expressions of the summary lines' fixed text, figures as `.*`
    arguments: tuple[str, ...] = ()  # after --quick
    cloud: bool = False  # needs the emulated clouds
    seconds: float = 10.0  # about how long its quick run takes here (the longest start first)
    script: str = ""  # the script's name, when the case's is not (one script, two cases)


SCRIPTS = {
    "parse_cost": Script([
        r"^ratio steps/plain: .* \(target <= 1\.2x\)$",
        r"^heavy modules loaded by the steps: ",
    ], seconds=12),
    "execute_overhead": Script([
        r"^ratio execute/floor: .*; no target: see turnaround\.py\)$",
        r"^ratio execute/contract floor: ",
        r"^execute\(\) target: < 2 s$",
    ], seconds=8),
    "artifact_transfer": Script([
        r"^speed ours/raw \(raw time / our time\): .* \(>= 0\.8x\)$",
    ], seconds=1),
    "sagemaker_control_plane": Script([
        r"^SageMaker API calls per job at equal poll intervals .* ratio ours/theirs = ",
        r"^SageMakerStepOperator\.execute\(\) worker time, warm: median .* \(target < 2 s\)$",
    ], cloud=True, seconds=20),
    "vertex_control_plane": Script([
        r"^JobService calls per job, ours at .* ratio ours/baseline = ",
        r"^VertexStepOperator\.execute\(\) worker time, warm: median .* \(target < 2 s\)$",
    ], cloud=True, seconds=21),
    "azureml_control_plane": Script([
        r"^Azure ML API calls per job, ours at .* ratio ours/theirs = ",
        r"^Worker seconds per job \(warm\): ours .* ratio ours/theirs = ",
        r"^AzureMLStepOperator\.execute\(\) worker time, warm: median .* \(target < 2 s\)$",
    ], cloud=True, seconds=19),
    # Two backends, as each takes about half a minute: SageMaker's exercises a fake of the
    # bench's own, its counting proxy and the stack's moto; all backends share the rest.
    "many_jobs": Script([
        r"^=== .* concurrent deferred sagemaker steps in one `airflow triggerer` process ",
        r"^status calls per poll interval: .* \(target <= 1%\)$",
        r"^log calls \(.*\): .* \(\[stepop\] log_calls_per_second\)$",
        r"^triggerer CPU, steady state: .* \(target < 10%\)",
    ], arguments=("--backend", "sagemaker"), cloud=True, seconds=40),
    # Kubernetes': a fake whose counters name operation ids, two Lists a poll, timer pods
    "many_jobs_kubernetes": Script([
        r"^=== .* concurrent deferred kubernetes steps in one `airflow triggerer` process ",
        r"^status calls per poll interval: .* listBatchV1NamespacedJob pages, .* "
        r"listCoreV1NamespacedPod pages, .* \(target <= 1%\)$",
        r"^log calls \(readCoreV1NamespacedPodLog\): .* \(\[stepop\] log_calls_per_second\)$",
        r"^triggerer CPU, steady state: .* \(target < 10%\)",
    ], arguments=("--backend", "kubernetes"), cloud=True, seconds=31, script="many_jobs"),
    "image_builds": Script([
        r"^worker-slot seconds per step, engine path \(build \+ push on the worker\): ",
        r"^worker-slot seconds per step, service path \(context upload \+ StartBuild\): ",
        r"^build end -> job created, service path: .* poll intervals; target <= 1\)$",
    ], cloud=True, seconds=40),
    "log_relay": Script([
        r"^relay memory growth: .* \(bound .* MiB\); every byte once, in order: yes$",
    ], seconds=4),
    # a hit against a miss on the local backend, then the example pipeline run twice with
    # `airflow dags test` (most of its half minute: the CLI's start and the DAG's jobs)
    "step_cache": Script([
        r"^ratio hit/miss execute\(\): ",
        r"^ratio hit/miss worker slot: ",
        r"^jobs made by the unchanged re-run: .* \(target 0",
        r"^ratio second/first, command: ",
        r"^ratio second/first, DAG run: ",
    ], seconds=32),
    # a deployment of Airflow's four services on PostgreSQL, one run of each chain: the local
    # rows and SageMaker's at a 1 s poll on both sides (its default-interval rows are left out)
    "turnaround": Script([
        r"^=== chains of 4 tasks, 1 run\(s\) each, ",
        r"^local step turnaround over a plain @task: .* \(target <= 2 s\); resumed in a worker: ",
        r"^SageMaker step turnaround over a plain @task: .* \(target <= 7 s\)$",
        r"^ratio ours/SageMakerTrainingOperator, poll 1 s both: .* \(target <= 0\.8x\)$",
    ], cloud=True, seconds=70),
    # the local backend's rows of two faults, through the suite's own tests
    "fault_matrix": Script([
        r"^failure in execute\(\) after submit, no retry left +local +survived ",
        r"^user kill +local +survived ",
        r"^.* of .* rows survived$",
    ], seconds=12),
}  # fmt: skip


def run_script(argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, str, float]:
    """(exit status, its stdout and stderr as they interleaved, seconds taken). Past ``timeout``
    the script gets SIGTERM first, as from a shell, so that it stops what it started (fakes, a
    triggerer, PostgreSQL)."""
    started = time.monotonic()
    with subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    ) as process:
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                output, _ = process.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                output, _ = process.communicate()
            output += f"\n(stopped: still running after {timeout} s)"
    return process.returncode, output, time.monotonic() - started


@pytest.fixture(scope="module")
def runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future[tuple[int, str, float]]]]:
    """The selected scripts' runs, all started at once, ``PARALLEL`` at a time, longest first:
    most of a quick run is waiting (for a poll, a fake's job, a process to start), so one after
    the other they would take about twice as long."""
    here = Path(__file__)
    selected = [
        item.callspec.params["script"]
        for item in request.session.items
        if item.path == here and "script" in getattr(getattr(item, "callspec", None), "params", {})
    ]
    clouds: dict[str, str] = {}
    if any(SCRIPTS[name].cloud for name in selected):
        request.getfixturevalue("registry_image")  # the image every fake's job names
        clouds = request.getfixturevalue("cloud_stack")
    # conftest.py's DAG folder is the test session's, not a benchmark's; and an MLClient built
    # by an earlier test records its cloud in this process's environment (azure-ai-ml's
    # AZUREML_CURRENT_CLOUD), an emulated one that only this process knows: a script that
    # imports azure.ai.ml with it set fails, as no user's shell would
    left_by_the_session = {"AIRFLOW__CORE__DAGS_FOLDER", "AZUREML_CURRENT_CLOUD"}
    base = {k: v for k, v in os.environ.items() if k not in left_by_the_session}
    pool = ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="bench-quick")
    futures = {}
    for name in sorted(selected, key=lambda name: -SCRIPTS[name].seconds):
        script, home = SCRIPTS[name], tmp_path_factory.mktemp(name)
        env = {
            **base,
            **(clouds if script.cloud else {}),
            "AIRFLOW_HOME": str(home / "airflow"),
            "STEPOP_TEST_AIRFLOW_HOME": str(home / "airflow"),  # fault_matrix's pytest's
            "STEPOP_CACHE_DIR": str(home / "cache"),  # not the test session's bundle cache
            "PYTHONUNBUFFERED": "1",  # its own lines in order with its logs'
        }
        argv = [sys.executable, f"bench/{script.script or name}.py", "--quick", *script.arguments]
        futures[name] = pool.submit(run_script, argv, env, TIMEOUT)
    try:
        yield futures
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_a_benchmarks_quick_mode_runs_and_prints_its_summary(script, runs):
    status, output, seconds = runs[script].result()
    case = SCRIPTS[script]
    shown = " ".join([f"bench/{case.script or script}.py", "--quick", *case.arguments])
    print(f"{shown}: exit status {status} after {seconds:.1f} s")  # shown by pytest -rA
    tail = f"the end of its output:\n{output[-6000:]}"
    assert status == 0, f"{shown} exited with {status} after {seconds:.0f} s; {tail}"
    missing = [line for line in case.summary if not re.search(line, output, re.M)]
    assert not missing, f"{shown} printed no line matching {missing}; {tail}"
