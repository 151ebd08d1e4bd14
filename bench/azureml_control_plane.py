"""Control-plane calls per Azure ML job: AzureMLStepOperator vs Microsoft's operator.

Both run the same job (``time.sleep(SECONDS)`` in the same image) on a private Azure ML fake
(so its counters are ours alone) over the stack's Azurite. Ours runs in deferrable mode: its
``execute()`` until it defers, its trigger until the event, then ``execute_complete()``, as
``dag.test()`` and a triggerer would. Microsoft's ``AzureMachineLearningCreateJobOperator``
(package ``airflow-provider-azure-machinelearning``, a 2023 preview) creates the job with
``MLClient.jobs.create_or_update`` and, with ``waiting=True``, blocks the worker in
``MLClient.jobs.stream`` until the job ends. Its hook only knows client secrets against the
public cloud, so the benchmark hands it an ``MLClient`` on the fake (what its hook would
build); when the package is not importable the same two ``MLClient`` calls run directly.
Calls are counted by the fake, by operation.

Then the worker time of ``AzureMLStepOperator.execute()`` (stage, submit, defer) with warm
caches (the code bundle exists), median of a few runs.

    make cloud-up
    .venv/bin/uv pip install --python .venv/bin/python --target .bench-amlprov --no-deps \
        airflow-provider-azure-machinelearning==0.0.1b2    # Microsoft's operator, kept apart
    STEPOP_BENCH_AML_PROVIDER=.bench-amlprov \
        .venv/bin/python bench/azureml_control_plane.py [--seconds 30] [--poll 5] [--quick]

(``STEPOP_BENCH_AML_PROVIDER`` names the directory holding that package; without it, the
script runs the operator's two ``MLClient`` calls.)
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
# --quick: a smoke run (the same lines, figures of no weight): 1 s jobs polled every second
QUICK = {"seconds": 1.0, "poll": 1.0, "slow_poll": 1.0, "timing_runs": 1}
QUICK_HELP = f"a smoke run of about half a minute: {QUICK}; the figures mean nothing"


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


def _sleep_step(seconds: float) -> str:
    import time as clock

    clock.sleep(seconds)
    return "slept"


def _context(ti: _TI) -> dict[str, Any]:
    return {"ti": ti, "task_instance": ti, "run_id": ti.run_id}


def _run_deferrable(operator: Any, ti: _TI) -> tuple[Any, float]:
    """execute() until defer, the trigger to its event, execute_complete(); worker seconds."""
    from airflow.sdk.exceptions import TaskDeferred

    started = time.perf_counter()
    try:
        return operator.execute(_context(ti)), time.perf_counter() - started
    except TaskDeferred as deferred:
        worker = time.perf_counter() - started
        trigger, method = deferred.trigger, deferred.method_name

    async def first_event() -> Any:
        events = trigger.run()
        try:
            return (await anext(events)).payload
        finally:
            await events.aclose()  # the trigger's cleanup: its poller closes the clients

    payload = asyncio.run(first_event())
    started = time.perf_counter()
    result = getattr(operator, method)(_context(ti), payload)
    return result, worker + time.perf_counter() - started


def _ours(image: str, seconds: float, poll: float) -> Any:
    from airflow_stepop import AzureMLStepOperator, DockerSettings

    return AzureMLStepOperator(
        task_id="ours",
        python_callable=_sleep_step,
        op_args=[seconds],
        docker=DockerSettings(parent_image=image),
        instance_type="Standard_DS3_v2",
        poll_interval=poll,
        experiment_name="bench",
    )


def _mlclient(fake: Any) -> Any:
    """The MLClient Microsoft's hook would build, on the fake."""
    from azure.ai.ml import MLClient
    from azure.core.credentials import AccessToken

    from cloud import azureml

    class Token:
        def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
            return AccessToken("bench", int(time.time()) + 3600)

    return MLClient(
        Token(), azureml.SUBSCRIPTION, azureml.RESOURCE_GROUP, azureml.WORKSPACE,
        cloud="StepopBench", cloud_metadata=azureml.cloud_metadata(fake.https_url),
        connection_verify=fake.ca_bundle,
    )  # fmt: skip


def _their_job(image: str, seconds: float) -> Any:
    from azure.ai.ml import command
    from azure.ai.ml.entities import Environment, JobResourceConfiguration

    job = command(
        command=f'python3 -c "import time; time.sleep({seconds})"',
        environment=Environment(image=image),
        name=f"msft-bench-{uuid.uuid4().hex[:10]}",
        display_name="msft-bench",
        experiment_name="bench",
    )
    job.resources = JobResourceConfiguration(instance_type="Standard_DS3_v2", instance_count=1)
    return job


def _theirs(fake: Any, image: str, seconds: float) -> tuple[str, float]:
    """Microsoft's operator with waiting=True (or its two MLClient calls); worker seconds."""
    client = _mlclient(fake)
    job = _their_job(image, seconds)
    started = time.perf_counter()
    try:
        # Microsoft's provider, where it is installed apart (it pins another Airflow): only a
        # folder the user names, never a default one that anyone may write to
        if provider_dir := os.environ.get("STEPOP_BENCH_AML_PROVIDER"):
            sys.path.insert(0, provider_dir)
        from airflow_provider_azure_machinelearning.operators.machine_learning.job import (
            AzureMachineLearningCreateJobOperator,
        )
    except Exception as exc:  # not installed, or not importable on this Airflow
        print(f"  (Microsoft's operator is not importable: {exc!r}; running its MLClient calls)")
        created = client.jobs.create_or_update(job)
        client.jobs.stream(created.name)
        return "MLClient.jobs.create_or_update + MLClient.jobs.stream", (
            time.perf_counter() - started
        )
    operator = AzureMachineLearningCreateJobOperator(
        task_id="theirs", conn_id="unused", job=job, waiting=True
    )

    class OnTheFake:
        def __init__(self, *args: Any) -> None: ...

        def get_client(self) -> Any:
            return client

    import airflow_provider_azure_machinelearning.operators.machine_learning.job as module

    module.AzureMachineLearningHook = OnTheFake
    started = time.perf_counter()
    operator.execute(_context(_TI("bench", "theirs")))
    return "AzureMachineLearningCreateJobOperator(waiting=True)", time.perf_counter() - started


def _show(title: str, calls: dict[str, int]) -> None:
    print(f"  {title}: {sum(calls.values())} calls")
    for operation, n in sorted(calls.items()):
        print(f"    {operation:28s} {n}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="job duration")
    parser.add_argument("--poll", type=float, default=5.0, help="our poll_interval")
    parser.add_argument("--slow-poll", type=float, default=30.0,
                        help="our poll_interval in the second run")  # fmt: skip
    parser.add_argument("--timing-runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help=QUICK_HELP)
    args = parser.parse_args()
    if args.quick:  # its sizes become the defaults: an argument given still wins
        parser.set_defaults(**QUICK)
        args = parser.parse_args()

    from cloud import azureml, stack
    from cloud.control import FakeControl

    env = stack.read_env()
    if not env or not stack.running(env):
        sys.exit("The emulated cloud is not running: make cloud-up")
    os.environ.update(env)
    fake = azureml.serve(
        "127.0.0.1", 0, storage_connection_string=env["AZURE_STORAGE_CONNECTION_STRING"]
    )
    connection = json.loads(azureml.stack_env(fake.url, env)["AIRFLOW_CONN_AZUREML_DEFAULT"])
    connection["extra"].update(endpoint=fake.https_url, ca_bundle=fake.ca_bundle)
    os.environ["AIRFLOW_CONN_AZUREML_DEFAULT"] = json.dumps(connection)
    os.environ["AIRFLOW__STEPOP__ARTIFACT_ROOT"] = "abfs://azureml-blobstore/bench"
    control = FakeControl(fake.url)
    image = f"{env.get('STEPOP_REGISTRY', '127.0.0.1:5000')}/stepop-base/python:3.11-bookworm"
    try:
        print(f"One job of {args.seconds:g} s on the Azure ML fake")
        measured = []  # in run order (two titles are one when --poll is --slow-poll)
        for title, poll in ((f"AzureMLStepOperator, poll_interval={args.poll:g}", args.poll),
                            (f"AzureMLStepOperator, poll_interval={args.slow_poll:g}",
                             args.slow_poll)):  # fmt: skip
            control.reset()
            started = time.monotonic()
            _, worker = _run_deferrable(_ours(image, args.seconds, poll), _TI("bench", "ours"))
            measured.append((control.counters(), worker))
            _show(f"{title} ({time.monotonic() - started:.0f} s)", measured[-1][0])
            print(
                f"    the worker was busy {worker:.1f} s (execute + execute_complete"
                + (", with the first imports)" if len(measured) == 1 else ")")
            )
        control.reset()
        started = time.monotonic()
        title, worker = _theirs(fake, image, args.seconds)
        measured.append((control.counters(), worker))
        _show(f"{title} ({time.monotonic() - started:.0f} s)", measured[-1][0])
        print(f"    the worker was busy {worker:.1f} s (it waits in execute())")

        (ours, _), (ours_slow, ours_worker), (theirs, theirs_worker) = measured
        for label, mine in ((f"ours at {args.poll:g} s", ours),
                            (f"ours at {args.slow_poll:g} s", ours_slow)):  # fmt: skip
            ratio = sum(mine.values()) / max(1, sum(theirs.values()))
            print(
                f"Azure ML API calls per job, {label} vs theirs: {sum(mine.values())} vs "
                f"{sum(theirs.values())}, ratio ours/theirs = {ratio:.2f}"
            )
        print(
            f"Worker seconds per job (warm): ours {ours_worker:.1f} vs theirs {theirs_worker:.1f}, "
            f"ratio ours/theirs = {ours_worker / max(theirs_worker, 1e-9):.3f}"
        )

        from airflow.sdk.exceptions import TaskDeferred

        from airflow_stepop.backends.azureml.backend import AzureMLBackend

        timings = []
        for _ in range(args.timing_runs):
            operator = _ours(image, 600, args.poll)
            ti = _TI("bench", "ours")
            started = time.perf_counter()
            try:
                operator.execute(_context(ti))
            except TaskDeferred as deferred:
                timings.append(time.perf_counter() - started)
                AzureMLBackend().stop(deferred.trigger.handle)
        print(
            f"AzureMLStepOperator.execute() worker time, warm: median "
            f"{statistics.median(timings):.3f} s, max {max(timings):.3f} s over "
            f"{len(timings)} runs (target < 2 s)"
        )
    finally:
        fake.shutdown()


if __name__ == "__main__":
    main()
