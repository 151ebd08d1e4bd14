"""Control-plane calls per Vertex AI job: VertexStepOperator vs a describe-per-poll baseline.

Airflow's closest operator, ``CreateCustomTrainingJobOperator(deferrable=True)``, cannot run
against the emulated cloud: it goes through the ``google.cloud.aiplatform`` SDK, which creates a
TrainingPipeline (not emulated) over gRPC (the fake speaks REST). What its deferred path costs is
simple, so the baseline does the same against the same fake with the official REST client: one
create, then one Get per job every ``--baseline-poll`` seconds (the operator's
``poll_interval`` default is 60 s), no log relay, nothing batched. Ours runs twice: at
``--poll``, and at the baseline's interval.

Ours runs as ``dag.test()`` and a triggerer would: ``execute()`` until it defers, the triggers
until their events (all in one event loop, as in one triggerer: triggers of one project and
location share one poller, whose ListCustomJobs answers for all their jobs), then
``execute_complete()``. Calls are counted by the private fake itself (``/_fake/counters``):
JobService and Cloud Logging. Then the worker time of ``execute()`` with warm caches.

    make cloud-up
    .venv/bin/python bench/vertex_control_plane.py [--seconds 30] [--jobs 4] [--poll 5] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="stepop-bench-"))
PROJECT, LOCATION = "stepop-bench", "us-central1"
# --quick: a smoke run (the same lines, figures of no weight): two 1 s jobs polled every second
QUICK = {"seconds": 1.0, "jobs": 2, "poll": 1.0, "baseline_poll": 1.0, "timing_runs": 1}
QUICK_HELP = f"a smoke run of about half a minute: {QUICK}; the figures mean nothing"


class _TI:
    """The part of a task instance the operators touch outside Airflow's task runner."""

    def __init__(self, dag_id: str, task_id: str) -> None:
        self.dag_id, self.task_id = dag_id, task_id
        self.run_id = f"bench__{uuid.uuid4().hex[:10]}"
        self.map_index, self.try_number, self.max_tries = -1, 1, 0
        self.start_date = datetime.now(UTC)
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


def _sleep_step(seconds: float) -> str:
    import time as clock

    clock.sleep(seconds)
    return "slept"


def _ours(image: str, seconds: float, poll: float) -> Any:
    from airflow_stepop import VertexStepOperator

    return VertexStepOperator(
        task_id="ours", python_callable=_sleep_step, op_args=[seconds], image_uri=image,
        machine_type="n1-standard-4", poll_interval=poll,
    )  # fmt: skip


def _run_ours(jobs: int, image: str, seconds: float, poll: float) -> tuple[list[Any], float]:
    """``jobs`` steps: execute() each, all triggers in one loop, execute_complete() each."""
    from airflow.sdk.exceptions import TaskDeferred

    deferred, workers = [], []
    for _ in range(jobs):
        operator, ti = _ours(image, seconds, poll), _TI("bench", "ours")
        context = {"ti": ti, "task_instance": ti, "run_id": ti.run_id}
        started = time.perf_counter()
        try:
            operator.execute(context)
            raise RuntimeError("the operator did not defer")
        except TaskDeferred as event:
            workers.append(time.perf_counter() - started)
            deferred.append((operator, context, event))

    async def first_event(trigger: Any) -> Any:
        async for event in trigger.run():
            return event.payload
        raise RuntimeError("no event")

    async def all_events() -> list[Any]:
        return await asyncio.gather(*(first_event(e.trigger) for _, _, e in deferred))

    payloads = asyncio.run(all_events())
    results = [
        getattr(op, e.method_name)(ctx, p)
        for (op, ctx, e), p in zip(deferred, payloads, strict=True)
    ]
    return results, max(workers)


def _run_baseline(jobs: int, image: str, seconds: float, poll: float, endpoint: str) -> None:
    """Create each job, then one GetCustomJob per job per poll until all are done."""
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform_v1

    client = aiplatform_v1.JobServiceClient(
        transport="rest", client_options=ClientOptions(api_endpoint=endpoint),
        credentials=AnonymousCredentials(),
    )  # fmt: skip
    parent = f"projects/{PROJECT}/locations/{LOCATION}"
    names = []
    for i in range(jobs):
        job = {
            "display_name": f"airflow-baseline-{uuid.uuid4().hex[:8]}-{i}",
            "job_spec": {
                "worker_pool_specs": [{
                    "machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
                    "container_spec": {"image_uri": image, "command": [
                        "python3", "-c", f"import time; time.sleep({seconds})"]},
                }]
            },
        }  # fmt: skip
        names.append(client.create_custom_job(parent=parent, custom_job=job).name)
    pending = set(names)
    while pending:
        time.sleep(poll)
        for name in sorted(pending):
            if client.get_custom_job(name=name).state.name in (
                "JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED",
            ):  # fmt: skip
                pending.discard(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="job duration")
    parser.add_argument("--jobs", type=int, default=4, help="steps deferred at the same time")
    parser.add_argument("--poll", type=float, default=5.0, help="our poll_interval")
    parser.add_argument("--baseline-poll", type=float, default=60.0)
    parser.add_argument("--timing-runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help=QUICK_HELP)
    args = parser.parse_args()
    if args.quick:  # its sizes become the defaults: an argument given still wins
        parser.set_defaults(**QUICK)
        args = parser.parse_args()

    from cloud import stack, vertex
    from cloud.control import FakeControl
    from cloud.vertex.gcs import storage_client

    env = stack.read_env()
    if not env or not stack.running(env):
        sys.exit("The emulated cloud is not running: make cloud-up")
    os.environ.update(env)
    # A private fake: its counters count our calls alone.
    fake = vertex.serve("127.0.0.1", 0, gcs_emulator_host=env["STORAGE_EMULATOR_HOST"])
    control = FakeControl(fake.url)
    connection = {"conn_type": "google_cloud_platform", "extra": {
        "project": PROJECT, "is_anonymous": True, "vertex_endpoint": fake.url,
        "logging_endpoint": fake.url}}  # fmt: skip
    os.environ["AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT"] = json.dumps(connection)
    bucket = "stepop-bench"
    gcs = storage_client(env["STORAGE_EMULATOR_HOST"])
    if gcs.lookup_bucket(bucket) is None:
        gcs.create_bucket(bucket)
    os.environ["AIRFLOW__STEPOP__ARTIFACT_ROOT"] = f"gs://{bucket}/stepop"
    image = f"{env.get('STEPOP_REGISTRY', '127.0.0.1:5000')}/stepop-base/python:3.11-bookworm"
    try:
        print(f"{args.jobs} jobs of {args.seconds:g} s at the same time on the Vertex fake")
        measured = []  # in run order (two titles are one when --poll is --baseline-poll)
        for title, run in (
            (f"VertexStepOperator, poll_interval={args.poll:g}",
             lambda: _run_ours(args.jobs, image, args.seconds, args.poll)),
            (f"VertexStepOperator, poll_interval={args.baseline_poll:g}",
             lambda: _run_ours(args.jobs, image, args.seconds, args.baseline_poll)),
            (f"describe-per-poll baseline, poll {args.baseline_poll:g} s",
             lambda: _run_baseline(args.jobs, image, args.seconds, args.baseline_poll, fake.url)),
        ):  # fmt: skip
            control.reset()
            started = time.monotonic()
            run()
            calls = control.counters()
            measured.append(calls)
            print(f"  {title} ({time.monotonic() - started:.0f} s): {sum(calls.values())} calls")
            for operation, n in sorted(calls.items()):
                print(f"    {operation:20s} {n}")

        def jobs_api(calls: dict[str, int]) -> int:
            return sum(n for op, n in calls.items() if op != "ListLogEntries")

        ours_fast, ours_equal, baseline = measured
        for label, ours in (
            (f"poll {args.baseline_poll:g} s", ours_equal),
            (f"poll {args.poll:g} s", ours_fast),
        ):
            ratio = jobs_api(ours) / max(1, jobs_api(baseline))
            print(
                f"JobService calls per job, ours at {label} vs the baseline at "
                f"{args.baseline_poll:g} s: {jobs_api(ours) / args.jobs:.1f} vs "
                f"{jobs_api(baseline) / args.jobs:.1f}, ratio ours/baseline = {ratio:.2f} "
                f"(ours also relays logs: {ours.get('ListLogEntries', 0) / args.jobs:.1f} "
                "Cloud Logging calls per job; the baseline relays none)"
            )

        from airflow.sdk.exceptions import TaskDeferred

        timings = []
        for _ in range(args.timing_runs):
            operator, ti = _ours(image, 600, args.poll), _TI("bench", "ours")
            started = time.perf_counter()
            try:
                operator.execute({"ti": ti, "task_instance": ti, "run_id": ti.run_id})
            except TaskDeferred as deferred:
                timings.append(time.perf_counter() - started)
                operator.make_backend().stop(deferred.trigger.handle)
        print(
            f"VertexStepOperator.execute() worker time, warm: median "
            f"{statistics.median(timings):.3f} s, max {max(timings):.3f} s over "
            f"{len(timings)} runs (target < 2 s)"
        )
    finally:
        fake.shutdown()


if __name__ == "__main__":
    main()
