"""A step whose image must be built: the worker's engine builds it, or AWS CodeBuild does.

Each sample is a SageMaker step with an environment never built before (a new value in
``DockerSettings.environment``), run as a triggerer and a worker would run it: the operator's
``execute()`` until it defers, then its trigger until the training job exists. Side by side:

* ``engine`` (``[stepop] sagemaker_image_build = engine``): the worker builds and pushes the
  image, then submits the job and defers;
* ``service`` (``= service``, the worker with no engine: ``DOCKER_HOST`` points nowhere): the
  worker uploads the build context and starts a CodeBuild build, defers; the trigger follows the
  build and creates the job when it ends.

It prints the worker-slot seconds of each (``execute()`` until the deferral: target for the
service path, nothing beyond the context's upload and the StartBuild call) and, for the service
path, the delay from the build's end (CodeBuild's ``endTime``) to the job's creation
(SageMaker's ``CreationTime``): target, at most one poll interval. Both fakes really build with
the stack's engine; a private SageMaker fake (its own process) holds the jobs, which are stopped
once they exist.

    make cloud-up
    .venv/bin/python bench/image_builds.py [--samples 3] [--poll 5] [--quick]
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="stepop-bench-"))

from bench.sagemaker_control_plane import _TI, start_fake  # noqa: E402 - after the path is set

ROLE = "arn:aws:iam::123456789012:role/stepop-bench"
NOWHERE = "tcp://127.0.0.1:9"  # no engine answers there
QUICK = {"samples": 1, "poll": 1.0}
QUICK_HELP = f"a smoke run of under a minute: {QUICK}; the figures mean nothing"


def _step() -> str:
    return "ran"


def _operator(parent: str, salt: str, poll: float) -> Any:
    from airflow_stepop import DockerSettings, SageMakerStepOperator

    return SageMakerStepOperator(
        task_id="built",
        python_callable=_step,
        docker=DockerSettings(parent_image=parent, environment={"STEPOP_BENCH_SALT": salt}),
        role=ROLE,
        instance_type="ml.m5.large",
        poll_interval=poll,
    )


def _sample(mode: str, parent: str, poll: float, docker_host: str) -> dict[str, float]:
    """One step of a new environment in ``mode``: worker seconds, and for the service path
    the build's end to the job's creation."""
    from airflow.sdk.exceptions import TaskDeferred

    os.environ["AIRFLOW__STEPOP__SAGEMAKER_IMAGE_BUILD"] = mode
    os.environ["DOCKER_HOST"] = docker_host if mode == "engine" else NOWHERE
    operator, ti = _operator(parent, uuid.uuid4().hex, poll), _TI("bench_builds", "built")
    started = time.perf_counter()
    try:
        operator.execute({"ti": ti, "task_instance": ti, "run_id": ti.run_id})
        raise RuntimeError("the step did not defer")
    except TaskDeferred as deferred:
        worker = time.perf_counter() - started
        trigger = deferred.trigger.trigger()
    backend = operator.make_backend()
    figures = {"worker_s": worker}
    if mode == "service":
        build = dict(trigger.handle)
        event = asyncio.run(trigger._image_phase())
        if event is not None:
            raise RuntimeError(f"the build did not give a job: {event.payload}")
        job = trigger.handle
        codebuild = backend._clients.hook("codebuild").conn
        ended = codebuild.batch_get_builds(ids=[build["job_id"]])["builds"][0]["endTime"]
        created = _created(backend, job)
        figures["build_end_to_create_s"] = (created - ended).total_seconds()
    else:
        job = trigger.handle
    backend.stop(job)
    return figures


def _created(backend: Any, job: dict[str, Any]) -> Any:
    client = backend._clients.hook("sagemaker").conn
    return client.describe_training_job(TrainingJobName=job["job_id"])["CreationTime"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3, help="steps per path")
    parser.add_argument("--poll", type=float, default=5.0, help="the steps' poll_interval")
    parser.add_argument("--quick", action="store_true", help=QUICK_HELP)
    args = parser.parse_args()
    if args.quick:  # its sizes become the defaults: an argument given still wins
        parser.set_defaults(**QUICK)
        args = parser.parse_args()

    from cloud import stack

    env = stack.read_env()
    if not env or not stack.running(env) or "STEPOP_CODEBUILD_ENDPOINT" not in env:
        sys.exit("The emulated cloud (with its CodeBuild fake) is not running: make cloud-up")
    os.environ.update(env)
    docker_host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    fake, fake_url = start_fake()
    try:
        connection = json.loads(env["AIRFLOW_CONN_AWS_DEFAULT"])
        connection["extra"]["service_config"]["sagemaker"]["endpoint_url"] = fake_url
        os.environ["AIRFLOW_CONN_AWS_DEFAULT"] = json.dumps(connection)
        os.environ["AWS_ENDPOINT_URL_SAGEMAKER"] = fake_url
        os.environ["AIRFLOW__STEPOP__SAGEMAKER_ARTIFACT_ROOT"] = (
            f"s3://{env['STEPOP_DEMO_BUCKET']}/bench-builds-{uuid.uuid4().hex[:6]}"
        )
        os.environ["AIRFLOW__STEPOP__BUILD_NETWORK_MODE"] = "host"
        parent = f"{env.get('STEPOP_REGISTRY', '127.0.0.1:5000')}/stepop-base/python:3.11-bookworm"
        samples: dict[str, list[dict[str, float]]] = {"engine": [], "service": []}
        for _ in range(args.samples):  # alternated: the machine's load is shared
            for mode in samples:
                samples[mode].append(_sample(mode, parent, args.poll, docker_host))
    finally:
        fake.terminate()
        fake.wait(10)

    def median(mode: str, key: str) -> float:
        return statistics.median(s[key] for s in samples[mode])

    engine, service = median("engine", "worker_s"), median("service", "worker_s")
    delay = median("service", "build_end_to_create_s")
    print(f"samples per path: {args.samples}, poll_interval {args.poll:.1f} s")
    print(f"worker-slot seconds per step, engine path (build + push on the worker): {engine:.2f}")
    print(f"worker-slot seconds per step, service path (context upload + StartBuild): "
          f"{service:.2f}")  # fmt: skip
    print(f"ratio service/engine: {service / engine:.2f}x")
    print(f"build end -> job created, service path: {delay:.2f} s "
          f"({delay / args.poll:.2f} poll intervals; target <= 1)")  # fmt: skip


if __name__ == "__main__":
    main()
