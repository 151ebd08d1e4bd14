"""Many deferred steps in one triggerer: status and log calls per poll interval, and CPU share.

N SageMaker training jobs run on a private SageMaker fake in *timer* mode (a job prints one
line, "runs" for ``--seconds`` and succeeds, with no process: so that a thousand jobs fit on a
2-core machine; the step's code never runs). N ``StepJobTrigger``s, exactly as the triggerer
runs them (``trigger.run()`` in one asyncio loop of this process), watch them until every job
ended. Every AWS call is counted by operation and time.

Printed: status calls (ListTrainingJobs + DescribeTrainingJob) per poll interval in the steady
state (between the first full poll round and the first job's end) against N (Airflow's
operators describe each job once per interval), the final describes (one per finished job, for
billing), log calls per second against ``[stepop] log_calls_per_second``, and the CPU share of
this process over the watch (what a triggerer would spend; the fake runs in another process).

The local backend needs no service: its poller reads N job records per round (file reads, no
API call); ``--backend local`` measures its CPU share with N supervised ``sleep`` jobs.

    make cloud-up
    .venv/bin/python bench/many_jobs.py [--jobs 1000] [--seconds 240] [--poll 10]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="stepop-bench-"))

CALLS: list[tuple[float, str, str]] = []
ROLE = "arn:aws:iam::123456789012:role/stepop-bench"


def _count_calls() -> None:
    """Record every botocore/aiobotocore API call as (time, service, operation)."""
    import aiobotocore.client
    import botocore.client

    sync_call = botocore.client.BaseClient._make_api_call
    async_call = aiobotocore.client.AioBaseClient._make_api_call

    def counted(self: Any, operation: str, params: Any) -> Any:
        CALLS.append((time.monotonic(), self.meta.service_model.service_name, operation))
        return sync_call(self, operation, params)

    async def acounted(self: Any, operation: str, params: Any) -> Any:
        CALLS.append((time.monotonic(), self.meta.service_model.service_name, operation))
        return await async_call(self, operation, params)

    botocore.client.BaseClient._make_api_call = counted
    aiobotocore.client.AioBaseClient._make_api_call = acounted


CPU_SAMPLES: list[tuple[float, float]] = []  # (monotonic, process CPU seconds), every second


async def _watch(triggers: list[Any]) -> dict[str, int]:
    async def one(trigger: Any) -> str:
        async for event in trigger.run():
            return event.payload["status"]
        return "none"

    async def sample() -> None:
        while True:
            CPU_SAMPLES.append((time.monotonic(), time.process_time()))
            await asyncio.sleep(1.0)

    sampler = asyncio.ensure_future(sample())
    states = await asyncio.gather(*(one(t) for t in triggers))
    sampler.cancel()
    return dict(collections.Counter(states))


def _cpu_share(start: float, end: float) -> float:
    inside = [s for s in CPU_SAMPLES if start <= s[0] <= end]
    if len(inside) < 2:
        return float("nan")
    (t0, c0), (t1, c1) = inside[0], inside[-1]
    return (c1 - c0) / (t1 - t0)


def _start_fake(seconds: float) -> tuple[subprocess.Popen[str], str]:
    env = {
        **os.environ,
        "STEPOP_SAGEMAKER_MODE": "timer",
        "STEPOP_FAKE_TIMER_SECONDS": str(seconds),
    }
    fake = subprocess.Popen(
        [sys.executable, "-m", "cloud.sagemaker", "--port", "0"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    line = fake.stdout.readline() if fake.stdout else ""
    if "serving on" not in line:
        fake.terminate()
        sys.exit(f"the SageMaker fake did not start: {line!r}")
    return fake, line.split("serving on ", 1)[1].split()[0]


def _sagemaker(args: argparse.Namespace) -> None:
    from cloud import stack

    env = stack.read_env()
    if not env or not stack.running(env):
        sys.exit("The emulated cloud is not running: make cloud-up")
    os.environ.update(env)
    fake, url = _start_fake(args.seconds)
    connection = json.loads(env["AIRFLOW_CONN_AWS_DEFAULT"])
    connection["extra"]["service_config"]["sagemaker"]["endpoint_url"] = url
    os.environ["AIRFLOW_CONN_AWS_DEFAULT"] = json.dumps(connection)
    os.environ["AWS_ENDPOINT_URL_SAGEMAKER"] = url
    os.environ["AIRFLOW__STEPOP__POLL_INTERVAL"] = str(args.poll)
    import boto3

    from airflow_stepop.backends.sagemaker import SageMakerBackend
    from airflow_stepop.triggers.step_job import StepJobTrigger

    bucket = "stepop-bench"
    s3 = boto3.client("s3")
    if bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=bucket)
    client = boto3.client("sagemaker", endpoint_url=url)
    image = f"{env.get('STEPOP_REGISTRY', '127.0.0.1:5000')}/stepop-base/python:3.11-bookworm"
    stamp = int(time.time())
    print(f"Creating {args.jobs} timer jobs of {args.seconds:g} s on a private SageMaker fake...")
    creating = time.monotonic()

    def create(i: int) -> dict[str, Any]:
        name = f"bench-{stamp}-{i}-t1"
        run_uri = f"s3://{bucket}/runs/{name}"
        client.create_training_job(
            TrainingJobName=name,
            RoleArn=ROLE,
            AlgorithmSpecification={"TrainingImage": image, "TrainingInputMode": "File",
                                    "ContainerEntrypoint": ["python3", "-c", "pass"]},
            OutputDataConfig={"S3OutputPath": run_uri, "CompressionType": "NONE"},
            ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1,
                            "VolumeSizeInGB": 1},
            StoppingCondition={"MaxRuntimeInSeconds": 3600},
        )  # fmt: skip
        return {"job_id": name, "task_key": name, "run_uri": run_uri,
                "output_uri": f"{run_uri}/{name}/output/model", "region": "us-east-1",
                "submitted_at": time.time(), "machine": "ml.m5.large x 1",
                "price_per_hour": 0.115}  # fmt: skip

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=8) as pool:
        handles = list(pool.map(create, range(args.jobs)))
    print(f"Created in {time.monotonic() - creating:.0f} s; watching...")
    backend = SageMakerBackend()
    triggers = [
        StepJobTrigger(
            backend_path="airflow_stepop.backends.sagemaker.SageMakerBackend",
            backend_kwargs=backend.serialize(),
            handle=handle,
            poll_interval=args.poll,
            storage_conn_id="aws_default",
        )
        for handle in handles
    ]
    _count_calls()
    logging.getLogger("airflow.triggers").setLevel(logging.WARNING)
    logging.getLogger("airflow_stepop").setLevel(logging.WARNING)
    try:
        started, cpu = time.monotonic(), time.process_time()
        if os.environ.get("STEPOP_BENCH_PROFILE"):
            import cProfile

            with cProfile.Profile() as profile:
                states = asyncio.run(_watch(triggers))
            profile.dump_stats(os.environ["STEPOP_BENCH_PROFILE"])
        else:
            states = asyncio.run(_watch(triggers))
        wall, cpu = time.monotonic() - started, time.process_time() - cpu
    finally:
        fake.terminate()
        fake.wait(timeout=60)
    _report(args, states, started, wall, cpu)


def _report(
    args: argparse.Namespace, states: dict, started: float, wall: float, cpu: float
) -> None:
    status_ops = {"ListTrainingJobs", "DescribeTrainingJob"}
    log_ops = {"DescribeLogStreams", "GetLogEvents"}
    # Steady state: after the first round of every trigger (first polls ramp up over the
    # first 5+10 s) and before the first job ends (its final describe is not polling).
    describes = [t for t, _, op in CALLS if op == "DescribeTrainingJob"]
    first_end = min(describes) if describes else started + wall
    window = (started + 2 * args.poll, first_end)
    steady = [c for c in CALLS if window[0] <= c[0] < window[1]]
    intervals = max(1e-9, (window[1] - window[0]) / args.poll)
    status = sum(1 for _, _, op in steady if op in status_ops) / intervals
    describes_after = sum(1 for t, _, op in CALLS if t >= first_end and op == "DescribeTrainingJob")
    steady_logs = [c for c in steady if c[2] in log_ops]
    log_rate = len(steady_logs) / max(1e-9, window[1] - window[0])
    final_logs = sum(1 for t, _, op in CALLS if t >= first_end and op in log_ops)
    from airflow_stepop import config

    budget = config.get_float("log_calls_per_second")
    by_op = collections.Counter(op for _, _, op in CALLS)
    print(f"\n{args.jobs} concurrent SageMaker steps, timer jobs of {args.seconds:g} s, "
          f"poll_interval {args.poll:g} s; outcomes {states}; watched {wall:.0f} s")  # fmt: skip
    for op, n in sorted(by_op.items()):
        print(f"  {op:28s} {n}")
    ratio = status / args.jobs
    print(f"Status calls per poll interval, steady state: {status:.1f} vs {args.jobs} for one "
          f"describe per job per interval: ratio {ratio:.4f} (target <= 0.01)")  # fmt: skip
    print(f"Describes from the first job's end on (one per finished job: its final facts): "
          f"{describes_after}")  # fmt: skip
    print(
        f"Log calls, steady state: {log_rate:.2f}/s against a budget of {budget:g}/s; "
        f"then {final_logs} for the last reads of finished jobs (once per job, unbudgeted)"
    )  # noqa: E501
    steady_cpu = 100 * _cpu_share(*window)
    print(f"Triggerer CPU (this process), steady state: {steady_cpu:.1f}% of one core (target "
          f"< 10%); over the whole watch, finished jobs' last reads included: "
          f"{100 * cpu / wall:.1f}%")  # fmt: skip


def _local(args: argparse.Namespace) -> None:
    """N supervised local jobs (``sleep``) watched by N triggers: CPU share of the watch."""
    from airflow_stepop.backends.local import LocalBackend
    from airflow_stepop.backends.local_supervisor import __file__ as supervisor
    from airflow_stepop.triggers.step_job import StepJobTrigger

    jobs = Path(tempfile.mkdtemp(prefix="stepop-bench-jobs-"))
    backend = LocalBackend(jobs_dir=str(jobs))
    triggers = []
    print(f"Starting {args.jobs} local jobs of {args.seconds:g} s (sleep under the supervisor)...")
    for i in range(args.jobs):
        job_dir = jobs / f"bench-{i}-t1"
        job_dir.mkdir()
        lock = os.open(job_dir / "lock", os.O_CREAT | os.O_RDWR, 0o600)
        import fcntl

        fcntl.flock(lock, fcntl.LOCK_EX)
        command = ["sleep", str(args.seconds)]
        proc = subprocess.Popen(
            [sys.executable, supervisor, str(job_dir), "--", *command],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, pass_fds=(lock,),
        )  # fmt: skip
        os.close(lock)
        handle = {"job_id": job_dir.name, "task_key": job_dir.name, "mode": "process",
                  "pid": proc.pid, "run_uri": f"file://{job_dir}", "job_dir": str(job_dir),
                  "submitted_at": time.time()}  # fmt: skip
        triggers.append(
            StepJobTrigger(
                backend_path="airflow_stepop.backends.local.LocalBackend",
                backend_kwargs=backend.serialize(),
                handle=handle,
                poll_interval=args.poll,
            )
        )
    logging.getLogger("airflow_stepop").setLevel(logging.WARNING)
    started, cpu = time.monotonic(), time.process_time()
    states = asyncio.run(_watch(triggers))
    wall, cpu = time.monotonic() - started, time.process_time() - cpu
    print(f"\n{args.jobs} concurrent local steps of {args.seconds:g} s, poll_interval "
          f"{args.poll:g} s; outcomes {states}; watched {wall:.0f} s; no API calls")  # fmt: skip
    print(f"Triggerer CPU (this process): {cpu:.1f} s over {wall:.0f} s = "
          f"{100 * cpu / wall:.1f}% of one core (target < 10%)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=240.0, help="how long each job runs")
    parser.add_argument("--poll", type=float, default=10.0, help="poll_interval")
    parser.add_argument("--backend", choices=("sagemaker", "local"), default="sagemaker")
    args = parser.parse_args()
    (_local if args.backend == "local" else _sagemaker)(args)


if __name__ == "__main__":
    main()
