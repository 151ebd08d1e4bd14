"""Control-plane calls per SageMaker job: SageMakerStepOperator vs Airflow's own operator.

Both run the same job (``time.sleep(SECONDS)`` in the same image) on the same SageMaker fake (a
private one, so its counters are ours alone) over the stack's moto, in deferrable mode: the
operator's ``execute()`` until it defers, its trigger until the event, then
``execute_complete()``, as ``dag.test()`` and a triggerer would run them. Every AWS API call,
sync (botocore) and async (aiobotocore), is counted by service and operation.

Then the worker time of ``SageMakerStepOperator.execute()`` (stage, submit, defer) with warm
caches (the image and code bundle already exist; the hooks' connection lookup is not cached
across executes), median of a few runs.

    make cloud-up
    .venv/bin/python bench/sagemaker_control_plane.py [--seconds 30] [--poll 5] [--quick]

Airflow's operator: ``SageMakerTrainingOperator(deferrable=True)`` with its defaults
(``check_interval=30``, ``print_log=True``; ``--equal-poll`` sets its ``check_interval`` and our
poll interval of the equal-interval runs). Ours: ``poll_interval`` from ``--poll`` (the
provider's default is 5 s; the trigger polls faster during the first seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import statistics
import subprocess
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

CALLS: collections.Counter[tuple[str, str]] = collections.Counter()
ROLE = "arn:aws:iam::123456789012:role/stepop-bench"
# --quick: a smoke run (the same lines, figures of no weight): 1 s jobs polled every second
QUICK = {"seconds": 1.0, "poll": 1.0, "equal_poll": 1.0, "timing_runs": 1}
QUICK_HELP = f"a smoke run of about half a minute: {QUICK}; the figures mean nothing"


def _count_calls() -> None:
    """Count every botocore/aiobotocore API call by (service, operation)."""
    import aiobotocore.client
    import botocore.client

    sync_call = botocore.client.BaseClient._make_api_call
    async_call = aiobotocore.client.AioBaseClient._make_api_call

    def counted(self: Any, operation: str, params: Any) -> Any:
        CALLS[(self.meta.service_model.service_name, operation)] += 1
        return sync_call(self, operation, params)

    async def acounted(self: Any, operation: str, params: Any) -> Any:
        CALLS[(self.meta.service_model.service_name, operation)] += 1
        return await async_call(self, operation, params)

    botocore.client.BaseClient._make_api_call = counted
    aiobotocore.client.AioBaseClient._make_api_call = acounted


class _TI:
    """The part of a task instance the operators touch outside Airflow's task runner."""

    def __init__(self, dag_id: str, task_id: str) -> None:
        self.dag_id, self.task_id = dag_id, task_id
        self.run_id = f"bench__{uuid.uuid4().hex[:10]}"
        self.map_index, self.try_number = -1, 1
        self.start_date = datetime.now(UTC)
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


def start_fake() -> tuple[subprocess.Popen, str]:
    """A private SageMaker fake in its own process (its counters are ours alone): it and its
    URL; exits the benchmark when it does not start."""
    fake = subprocess.Popen(
        [sys.executable, "-m", "cloud.sagemaker", "--port", "0"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    line = fake.stdout.readline() if fake.stdout else ""
    if "serving on" not in line:
        fake.terminate()
        sys.exit(f"the SageMaker fake did not start: {line!r}")
    return fake, line.split("serving on ", 1)[1].split()[0]


def _sleep_step(seconds: float) -> str:
    import time as clock

    clock.sleep(seconds)
    return "slept"


def _run_deferrable(operator: Any, ti: _TI) -> tuple[Any, float, bool]:
    """execute() until defer, the trigger to its event, execute_complete().

    Returns the result, the seconds execute() held the worker, and whether it deferred (an
    operator may also wait in execute() and return without deferring).
    """
    from airflow.sdk.exceptions import TaskDeferred

    context = {"ti": ti, "task_instance": ti, "run_id": ti.run_id}
    started = time.perf_counter()
    try:
        result = operator.execute(context)
        return result, time.perf_counter() - started, False
    except TaskDeferred as deferred:
        worker = time.perf_counter() - started
        trigger, method = deferred.trigger, deferred.method_name

    async def first_event() -> Any:
        async for event in trigger.run():
            return event.payload
        raise RuntimeError("no event")

    payload = asyncio.run(first_event())
    return getattr(operator, method)(context, payload), worker, True


def _ours(image: str, seconds: float, poll: float) -> Any:
    from airflow_stepop import DockerSettings, SageMakerStepOperator

    return SageMakerStepOperator(
        task_id="ours",
        python_callable=_sleep_step,
        op_args=[seconds],
        docker=DockerSettings(parent_image=image),
        role=ROLE,
        instance_type="ml.m5.large",
        poll_interval=poll,
    )


def _theirs(image: str, seconds: float, bucket: str, print_log: bool, check_interval: float) -> Any:
    from airflow.providers.amazon.aws.operators.sagemaker import SageMakerTrainingOperator

    name = f"airflow-bench-{uuid.uuid4().hex[:10]}"
    config = {
        "TrainingJobName": name,
        "RoleArn": ROLE,
        "AlgorithmSpecification": {
            "TrainingImage": image,
            "TrainingInputMode": "File",
            "ContainerEntrypoint": ["python3", "-c", f"import time; time.sleep({seconds})"],
        },
        "OutputDataConfig": {"S3OutputPath": f"s3://{bucket}/airflow-bench"},
        "ResourceConfig": {
            "InstanceType": "ml.m5.large",
            "InstanceCount": 1,
            "VolumeSizeInGB": 30,
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    }
    return SageMakerTrainingOperator(
        task_id="theirs", config=config, deferrable=True, print_log=print_log,
        check_interval=check_interval,
    )  # fmt: skip


def _delta(before: collections.Counter) -> collections.Counter:
    return collections.Counter({k: v for k, v in (CALLS - before).items() if v})


def _show(title: str, calls: collections.Counter) -> None:
    print(f"  {title}: {sum(calls.values())} calls")
    for (service, operation), n in sorted(calls.items()):
        print(f"    {service:10s} {operation:28s} {n}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="job duration")
    parser.add_argument("--poll", type=float, default=5.0, help="our poll_interval")
    parser.add_argument("--equal-poll", type=float, default=30.0,
                        help="the poll interval of the equal-interval runs: Airflow's operator's "
                             "check_interval (its default: 30) and ours")  # fmt: skip
    parser.add_argument("--timing-runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help=QUICK_HELP)
    args = parser.parse_args()
    if args.quick:  # its sizes become the defaults: an argument given still wins
        parser.set_defaults(**QUICK)
        args = parser.parse_args()

    from cloud import stack

    env = stack.read_env()
    if not env or not stack.running(env):
        sys.exit("The emulated cloud is not running: make cloud-up")
    os.environ.update(env)
    # A private fake in its own process: its counters and our call counts are ours alone.
    fake, fake_url = start_fake()
    connection = json.loads(env["AIRFLOW_CONN_AWS_DEFAULT"])
    connection["extra"]["service_config"]["sagemaker"]["endpoint_url"] = fake_url
    os.environ["AIRFLOW_CONN_AWS_DEFAULT"] = json.dumps(connection)
    os.environ["AWS_ENDPOINT_URL_SAGEMAKER"] = fake_url
    bucket = "stepop-bench"
    os.environ["AIRFLOW__STEPOP__ARTIFACT_ROOT"] = f"s3://{bucket}/stepop"
    # the registry stands in for ECR, the only place SageMaker pulls images from
    registry = env.get("STEPOP_REGISTRY", "127.0.0.1:5000")
    os.environ["AIRFLOW__STEPOP__SAGEMAKER_IMAGE_REPOSITORY"] = f"{registry}/stepop-bench-env"
    import boto3

    s3 = boto3.client("s3")
    if bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=bucket)
    image = f"{env.get('STEPOP_REGISTRY', '127.0.0.1:5000')}/stepop-base/python:3.11-bookworm"
    _count_calls()
    try:
        print(f"One job of {args.seconds:g} s on the SageMaker fake, deferrable mode")
        equal = args.equal_poll
        runs = [
            (f"SageMakerStepOperator, poll_interval={args.poll:g}",
             lambda: _ours(image, args.seconds, args.poll)),
            (f"SageMakerStepOperator, poll_interval={equal:g}",
             lambda: _ours(image, args.seconds, equal)),
            (f"SageMakerTrainingOperator, check_interval={equal:g}, print_log=True (its default)",
             lambda: _theirs(image, args.seconds, bucket, print_log=True, check_interval=equal)),
            (f"SageMakerTrainingOperator, check_interval={equal:g}, print_log=False",
             lambda: _theirs(image, args.seconds, bucket, print_log=False, check_interval=equal)),
        ]  # fmt: skip
        measured = []
        for title, make in runs:
            before = collections.Counter(CALLS)
            started = time.monotonic()
            _, worker, deferred = _run_deferrable(make(), _TI("bench", "step"))
            wall = time.monotonic() - started
            calls = _delta(before)
            measured.append((title, calls, worker, deferred))
            _show(f"{title} ({wall:.0f} s)", calls)
            how = "then deferred" if deferred else "and never deferred: it waited in execute()"
            print(f"    execute() held the worker {worker:.1f} s {how}")

        def control(calls: collections.Counter) -> int:
            return sum(n for (service, _), n in calls.items() if service == "sagemaker")

        ours_default, ours_equal, theirs_logs, theirs_quiet = (m[1] for m in measured)
        for label, ours, theirs in (
            (
                f"at equal poll intervals ({equal:g} s), vs theirs without logs",
                ours_equal,
                theirs_quiet,
            ),
            (
                f"at equal poll intervals ({equal:g} s), vs theirs with print_log",
                ours_equal,
                theirs_logs,
            ),
            (f"ours at {args.poll:g} s vs theirs with print_log", ours_default, theirs_logs),
        ):
            ratio = control(ours) / max(1, control(theirs))
            print(
                f"SageMaker API calls per job {label}: ours {control(ours)}, theirs "
                f"{control(theirs)}, ratio ours/theirs = {ratio:.2f}; all AWS calls "
                f"{sum(ours.values())} vs {sum(theirs.values())}"
            )

        # Worker time in execute() with warm caches: bundle uploaded, image present.
        from airflow.sdk.exceptions import TaskDeferred

        from airflow_stepop.backends.sagemaker.backend import SageMakerBackend

        timings = []
        for _ in range(args.timing_runs):
            operator = _ours(image, 600, args.poll)
            ti = _TI("bench", "ours")
            started = time.perf_counter()
            try:
                operator.execute({"ti": ti, "task_instance": ti, "run_id": ti.run_id})
            except TaskDeferred as deferred:
                timings.append(time.perf_counter() - started)
                SageMakerBackend().stop(deferred.trigger.handle)
        print(
            f"SageMakerStepOperator.execute() worker time, warm: median "
            f"{statistics.median(timings):.3f} s, max {max(timings):.3f} s "
            f"over {len(timings)} runs (target < 2 s)"
        )
    finally:
        fake.terminate()
        fake.wait(timeout=30)


if __name__ == "__main__":
    main()
