"""Turnaround of a step as a user waits for it: chains of four tasks under Airflow's own processes.

One deployment on a private PostgreSQL: api-server, scheduler (LocalExecutor), dag-processor and
triggerer (``tests/e2e/services.py``), with the provider's defaults. Each DAG is a chain of four
tasks whose bodies return at once; the runs take turns, one DAG at a time, so that no two
compete for the machine's cores. Side by side in one run:

- four plain ``@task``s against four local steps (``@task.local_step``), whose triggers end
  their tasks, and four local steps with an ``on_success_callback``, which resume in a worker
  (the path every step took before, held ``[stepop] resume_hold_seconds``): the median DAG-run
  duration and the difference per task over the plain chain;
- with ``make cloud-up``, four SageMaker steps (``@task.sagemaker_step``) against four
  ``SageMakerTrainingOperator(deferrable=True)`` tasks on the same emulated SageMaker, the same
  image and a job that does nothing: per-task turnaround over the plain chain, both at equal
  poll intervals (``--poll``, default 5 s: our default) and each with its defaults (Airflow's
  ``check_interval`` is 30 s);
- worker-slot seconds per step: how long task processes existed for it (from the task log:
  each process's first and last line).

    make install            # and make cloud-up for the SageMaker rows
    .venv/bin/python bench/turnaround.py [--runs 3] [--poll 5] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ROLE = "arn:aws:iam::123456789012:role/stepop-bench"
CHAIN = 4
QUICK = {"runs": 1, "poll": 1.0, "defaults": False, "resumed": False}
QUICK_HELP = f"a smoke run: {QUICK}, the figures mean nothing"

DAGS = '''"""Chains of {chain} tasks whose bodies return at once (bench/turnaround.py)."""
from airflow.sdk import chain, dag, task

IMAGE, ROLE, POLL = {image!r}, {role!r}, {poll!r}


def _noop(context):
    return None


def _chain(make):
    chain(*[make(i) for i in range({chain})])


@dag(schedule=None)
def plain_chain():
    @task
    def body(i):
        return i

    _chain(lambda i: body.override(task_id=f"t{{i}}")(i))


@dag(schedule=None)
def local_chain():
    @task.local_step
    def body(i):
        return i

    _chain(lambda i: body.override(task_id=f"t{{i}}")(i))


@dag(schedule=None)
def local_chain_resumed():
    @task.local_step(on_success_callback=_noop)
    def body(i):
        return i

    _chain(lambda i: body.override(task_id=f"t{{i}}")(i))


plain_chain()
local_chain()
local_chain_resumed()


def _sagemaker_chain(poll):
    @task.sagemaker_step(instance_type="ml.m5.large", role=ROLE, image_uri=IMAGE,
                         poll_interval=poll)
    def body(i):
        return i

    _chain(lambda i: body.override(task_id=f"t{{i}}")(i))


def _airflow_chain(check_interval):
    from airflow.providers.amazon.aws.operators.sagemaker import SageMakerTrainingOperator

    def make(i):
        config = {{
            "TrainingJobName": "theirs-{{{{ ti.id }}}}",
            "RoleArn": ROLE,
            "AlgorithmSpecification": {{
                "TrainingImage": IMAGE, "TrainingInputMode": "File",
                "ContainerEntrypoint": ["python3", "-c", "pass"],
            }},
            "OutputDataConfig": {{"S3OutputPath": "s3://stepop-demo/turnaround-theirs"}},
            "ResourceConfig": {{"InstanceType": "ml.m5.large", "InstanceCount": 1,
                               "VolumeSizeInGB": 30}},
            "StoppingCondition": {{"MaxRuntimeInSeconds": 3600}},
        }}
        kwargs = {{}} if check_interval is None else {{"check_interval": check_interval}}
        return SageMakerTrainingOperator(task_id=f"t{{i}}", config=config, deferrable=True,
                                         **kwargs)

    _chain(make)


if IMAGE:

    @dag(schedule=None)
    def sagemaker_chain():
        _sagemaker_chain(POLL)

    @dag(schedule=None)
    def sagemaker_chain_default():
        _sagemaker_chain(None)

    @dag(schedule=None)
    def airflow_sagemaker_chain():
        _airflow_chain(POLL)

    @dag(schedule=None)
    def airflow_sagemaker_chain_default():
        _airflow_chain(None)

    for make in (sagemaker_chain, sagemaker_chain_default, airflow_sagemaker_chain,
                 airflow_sagemaker_chain_default):
        make()
'''

LOCAL = ("plain_chain", "local_chain", "local_chain_resumed")
SAGEMAKER = (
    "sagemaker_chain",
    "airflow_sagemaker_chain",
    "sagemaker_chain_default",
    "airflow_sagemaker_chain_default",
)


def _cloud_env() -> dict[str, str]:
    """The emulated clouds' settings when ``make cloud-up`` runs them, else {}."""
    from cloud import stack

    env = stack.read_env()
    return env if env and stack.running(env) else {}


def _run(api: Any, dag_id: str, timeout: float = 900) -> dict[str, Any]:
    """Trigger one run and wait for its end: the run as the REST API shows it."""
    path = f"/api/v2/dags/{dag_id}/dagRuns"
    run_id = api.post(path, {"logical_date": None})["dag_run_id"]
    deadline = time.monotonic() + timeout
    while (run := api.get(f"{path}/{run_id}"))["state"] not in ("success", "failed"):
        if time.monotonic() > deadline:
            sys.exit(f"{dag_id}: the run did not end within {timeout:.0f} s")
        time.sleep(0.5)
    if run["state"] != "success":
        sys.exit(f"{dag_id}: the run {run_id} failed; see the task logs")
    return run


def _seconds(run: dict[str, Any]) -> float:
    start, end = (datetime.fromisoformat(run[k]) for k in ("start_date", "end_date"))
    return (end - start).total_seconds()


def _worker_slot_seconds(home: Path, dag_id: str, run_id: str) -> tuple[float, int]:
    """Seconds task processes existed per task of the run, and task processes per task: from
    each worker log, the span of each process's lines (a process's log starts with the
    task runner's "::group::Pre Execute", the first line of each process's part)."""
    total, processes, tasks = 0.0, 0, 0
    where = home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
    for log in where.rglob("attempt=*.log"):
        if ".trigger." in log.name:  # the triggerer's part of the task log
            continue
        tasks += 1
        spans: list[list[datetime]] = []
        for line in log.read_text().splitlines():
            try:
                record = json.loads(line)
                stamp = datetime.fromisoformat(record["timestamp"])
            except (ValueError, KeyError, TypeError):
                continue
            starts = str(record.get("event")).startswith("::group::Pre Execute")
            if starts or not spans:
                spans.append([stamp, stamp])
            spans[-1][1] = stamp
        processes += len(spans)
        total += sum((end - start).total_seconds() for start, end in spans)
    return (total / tasks, round(processes / tasks)) if tasks else (0.0, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each DAG, in turn")
    parser.add_argument("--poll", type=float, default=5.0, help="poll interval of both sides")
    parser.add_argument("--no-defaults", dest="defaults", action="store_false",
                        help="skip the SageMaker rows with each side's default poll interval "
                             "(Airflow's is 30 s: most of the run)")  # fmt: skip
    parser.add_argument("--no-resumed", dest="resumed", action="store_false",
                        help="skip the chain of steps that resume in a worker (each waits "
                             "out resume_hold_seconds: most of the local rows' time)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help=QUICK_HELP)
    args = parser.parse_args()
    if args.quick:
        parser.set_defaults(**QUICK)
        args = parser.parse_args()

    from tests.e2e.services import airflow_deployment

    cloud = _cloud_env()
    image = f"{cloud.get('STEPOP_REGISTRY', '127.0.0.1:5000')}/stepop-base/python:3.11-bookworm"
    base = Path(tempfile.mkdtemp(prefix="stepop-turnaround-"))
    base.chmod(0o755)  # the PostgreSQL server runs as `postgres` when we are root
    dags = base / "dags"
    dags.mkdir()
    text = DAGS.format(chain=CHAIN, image=image if cloud else "", role=ROLE, poll=args.poll)
    (dags / "turnaround_dags.py").write_text(text)
    env = {**cloud, "AIRFLOW__STEPOP__SAGEMAKER_ARTIFACT_ROOT": "s3://stepop-demo/turnaround"}
    local = LOCAL if args.resumed else LOCAL[:2]
    dag_ids = local + (SAGEMAKER[: 4 if args.defaults else 2] if cloud else ())
    load = os.getloadavg()
    with airflow_deployment(base, dags, env) as (api, home):
        deadline = time.monotonic() + 180
        while not all(_exists(api, d) for d in dag_ids):
            if time.monotonic() > deadline:
                sys.exit(f"the DAGs did not load; see {home}/services/dag-processor.log")
            time.sleep(1)
        for dag_id in dag_ids:
            api.patch(f"/api/v2/dags/{dag_id}", {"is_paused": False})
        durations: dict[str, list[float]] = {d: [] for d in dag_ids}
        slots: dict[str, list[tuple[float, int]]] = {d: [] for d in dag_ids}
        for _ in range(args.runs):
            for dag_id in dag_ids:
                run = _run(api, dag_id)
                durations[dag_id].append(_seconds(run))
                slots[dag_id].append(_worker_slot_seconds(home, dag_id, run["dag_run_id"]))
    _report(durations, slots, args, load, os.getloadavg())


def _exists(api: Any, dag_id: str) -> bool:
    try:
        return bool(api.get(f"/api/v2/dags/{dag_id}"))
    except Exception:
        return False


def _report(durations, slots, args, load_before, load_after) -> None:
    median = {d: statistics.median(v) for d, v in durations.items()}
    per_task = {d: (median[d] - median["plain_chain"]) / CHAIN for d in median}
    print(f"=== chains of {CHAIN} tasks, {args.runs} run(s) each, load {load_before[0]:.1f} "
          f"before, {load_after[0]:.1f} after; median DAG-run seconds ===")  # fmt: skip
    for dag_id in durations:
        slot = statistics.median(s for s, _ in slots[dag_id])
        processes = max(p for _, p in slots[dag_id])
        print(f"  {dag_id:34s} {median[dag_id]:7.1f} s   per task over plain "
              f"{per_task[dag_id]:+6.1f} s   worker-slot {slot:5.1f} s/task, "
              f"{processes} task process(es)/task")  # fmt: skip
    resumed = per_task.get("local_chain_resumed")
    print(
        f"local step turnaround over a plain @task: {per_task['local_chain']:.1f} s per task "
        f"(target <= 2 s); resumed in a worker: "
        + (f"{resumed:.1f} s" if resumed is not None else "not run (--no-resumed)")
    )
    if "sagemaker_chain" in per_task:
        ours, theirs = per_task["sagemaker_chain"], per_task["airflow_sagemaker_chain"]
        print(f"SageMaker step turnaround over a plain @task: {ours:.1f} s per task, poll "
              f"{args.poll:g} s (target <= 7 s)")  # fmt: skip
        print(f"ratio ours/SageMakerTrainingOperator, poll {args.poll:g} s both: "
              f"{_ratio(ours, theirs)} (target <= 0.8x)")  # fmt: skip
    if "sagemaker_chain_default" in per_task:
        ours, theirs = (per_task[f"{side}_default"]
                        for side in ("sagemaker_chain", "airflow_sagemaker_chain"))  # fmt: skip
        print(f"ratio ours/SageMakerTrainingOperator, each with its defaults: "
              f"{_ratio(ours, theirs)} (target <= 0.5x)")  # fmt: skip
    if "sagemaker_chain" not in per_task:
        print("SageMaker rows: skipped (the emulated clouds are not running: make cloud-up)")


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}x" if theirs > 0 else f"n/a (theirs {theirs:+.1f} s per task)"


if __name__ == "__main__":
    main()
