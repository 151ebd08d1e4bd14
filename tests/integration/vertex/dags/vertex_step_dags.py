"""DAGs the Vertex integration tests run with dag.test() on the emulated cloud."""

from __future__ import annotations

import json
import os
from datetime import timedelta

import fault_operators
from airflow.sdk import dag, task
from step_helpers import wait_for_file

from airflow_stepop import DockerSettings, ResourceSettings, VertexStepOperator
from tests.integration.fault_steps import answer_once, held_step

RESULTS = os.environ.get("STEPOP_TEST_RESULTS", "/tmp")
REGISTRY = os.environ.get("STEPOP_REGISTRY", "127.0.0.1:5000")
BASE = f"{REGISTRY}/stepop-base/python:3.11-bookworm"
PARENT_ONLY = DockerSettings(parent_image=BASE)


def _remember(name: str, value) -> None:
    with open(f"{RESULTS}/{name}.json", "w") as handle:
        json.dump(value, handle)


def _remember_failure(context):
    _remember("failure", f"{type(context['exception']).__name__}: {context['exception']}")


def score(model_dir, scale: float) -> float:
    """A classic operator's callable: reads the model directory an upstream step wrote."""
    from pathlib import Path

    return float((Path(model_dir) / "weights.txt").read_text()) * scale


@dag(schedule=None)
def vx_pipeline():
    @task.vertex_step(docker=PARENT_ONLY, resources=ResourceSettings(cpu_count=2, memory="4GiB"))
    def train(n: int):
        import numpy

        return numpy.arange(n, dtype="float64")

    @task.vertex_step(docker=PARENT_ONLY, environment={"SETTING": "s"})
    def save_model(weights):
        import tempfile
        from pathlib import Path

        model = Path(tempfile.mkdtemp()) / "model"
        model.mkdir()
        (model / "weights.txt").write_text(str(float(weights.sum())))
        (model / "config.json").write_text(json.dumps({"n": int(weights.size)}))
        return model

    weights = train(100_000)
    scored = VertexStepOperator(
        task_id="score",
        python_callable=score,
        op_args=[save_model(weights)],
        op_kwargs={"scale": 2.0},
        docker=PARENT_ONLY,
    )

    @task.vertex_step(docker=PARENT_ONLY)
    def shard(weights, k: int):
        return float(weights[k::4].sum())

    @task
    def check(total, parts, weights_ref):
        loaded = float(weights_ref.load().sum())
        _remember("check", {"score": total, "parts": sum(parts), "loaded": loaded})

    check(scored.output, shard.partial(weights=weights).expand(k=[0, 1, 2, 3]), weights)


vx_pipeline()


@dag(schedule=None)
def vx_step_raises():
    @task.vertex_step(docker=PARENT_ONLY, on_failure_callback=_remember_failure)
    def explode(x: int):
        print("about to fail")
        raise ValueError(f"bad value {x}")

    explode(42)


vx_step_raises()

LOUD_LINES = 5_000


@dag(schedule=None)
def vx_loud_failure():
    @task.vertex_step(docker=PARENT_ONLY, on_failure_callback=_remember_failure)
    def shout(lines: int):
        for i in range(lines):
            print(f"{i:06d} loud")
        print("the last words before the raise", flush=True)
        raise ValueError("loud and failed")

    shout(LOUD_LINES)


vx_loud_failure()


@dag(schedule=None)
def vx_missing_bucket():
    @task.vertex_step(
        docker=PARENT_ONLY,
        artifact_root="gs://no-such-bucket-stepop/steps",
        on_failure_callback=_remember_failure,
    )
    def nowhere():
        return 1

    nowhere()


vx_missing_bucket()


@dag(schedule=None)
def vx_misspelt_machine():
    @task.vertex_step(
        docker=PARENT_ONLY, machine_type="n1-standrd-4", on_failure_callback=_remember_failure
    )
    def typo():
        return 1

    typo()


vx_misspelt_machine()


class LosesWorkerAfterSubmit(fault_operators.LosesWorkerAfterSubmit, VertexStepOperator):
    pass


@dag(schedule=None)
def vx_retry_reattaches():
    LosesWorkerAfterSubmit(
        task_id="held", python_callable=held_step, op_args=[f"{RESULTS}/release"],
        docker=PARENT_ONLY, retries=1, retry_delay=timedelta(seconds=0),
    )  # fmt: skip


vx_retry_reattaches()


class LosesWorkerAfterSuccess(fault_operators.LosesWorkerAfterSuccess, VertexStepOperator):
    pass


@dag(schedule=None)
def vx_retry_after_success():
    LosesWorkerAfterSuccess(
        task_id="paid_once", python_callable=answer_once, docker=PARENT_ONLY,
        retries=1, retry_delay=timedelta(seconds=0),
    )  # fmt: skip


vx_retry_after_success()


class FailsAfterSubmit(fault_operators.FailsAfterSubmit, VertexStepOperator):
    pass


@dag(schedule=None)
def vx_failure_after_submit():
    FailsAfterSubmit(
        task_id="orphan", python_callable=wait_for_file, op_args=["/nonexistent/never", 600],
        docker=PARENT_ONLY, on_failure_callback=_remember_failure,
    )  # fmt: skip


vx_failure_after_submit()


@dag(schedule=None)
def vx_spot_resumes():
    @task.vertex_step(docker=PARENT_ONLY, spot=True, max_runtime=600)
    def resumable(checkpointed: str):
        import time
        from pathlib import Path

        state = Path(os.environ["STEPOP_CHECKPOINT_DIR"]) / "epoch.txt"
        if state.exists():
            return f"resumed at epoch {state.read_text()}"
        state.write_text("7")
        open(checkpointed, "w").close()  # only now does the test let the preemption come
        time.sleep(120)  # the preemption comes before this ends
        return "never preempted"

    resumable(f"{RESULTS}/checkpointed")


vx_spot_resumes()


@dag(schedule=None)
def vx_two_nodes():
    @task.vertex_step(docker=PARENT_ONLY, replica_count=2, machine_type="n1-standard-4")
    def ranks():
        names = ("WORLD_SIZE", "RANK", "NODE_RANK", "LOCAL_RANK")
        return {name: os.environ[name] for name in names} | {"master": "MASTER_ADDR" in os.environ}

    ranks()


vx_two_nodes()


@dag(schedule=None)
def vx_times_out():
    @task.vertex_step(
        docker=PARENT_ONLY,
        execution_timeout=timedelta(seconds=8),
        on_failure_callback=_remember_failure,
    )  # no max_runtime: its default (the deadline plus 5 minutes) must not end the job first
    def slow():
        import time

        time.sleep(300)

    slow()


vx_times_out()


@dag(schedule=None)
def vx_gpu():
    @task.vertex_step(
        docker=PARENT_ONLY, resources=ResourceSettings(gpu_type="T4"), spot=True,
        labels={"team": "ml"},
    )  # fmt: skip
    def fit():
        return "fitted"

    fit()


vx_gpu()


@dag(schedule=None)
def vx_experiment():
    @task.vertex_step(
        docker=PARENT_ONLY, experiment="stepop-it-exp",
        service_account="trainer@stepop-it.iam.gserviceaccount.com",
        on_failure_callback=_remember_failure,
    )  # fmt: skip
    def logged():
        return "logged"

    logged()


vx_experiment()


@dag(schedule=None)
def vx_in_container():
    @task.vertex_step(image_uri=BASE, labels={"stepop_fake_mode": "container"})
    def contained(x: int):
        import sys

        return {"double": x * 2, "python": sys.version_info[:2] == (3, 11)}

    contained(21)


vx_in_container()


@dag(schedule=None)
def vx_chain():
    @task.vertex_step(docker=PARENT_ONLY)
    def make(n: int):
        import numpy

        return numpy.ones(n)

    @task.vertex_step(docker=PARENT_ONLY)
    def total(values):
        return float(values.sum())

    total(make(50_000))


vx_chain()


@dag(schedule=None)
def vx_stockout():
    @task.vertex_step(docker=PARENT_ONLY, on_failure_callback=_remember_failure)
    def scarce():
        return "never runs"

    scarce()


vx_stockout()


@dag(schedule=None)
def vx_not_deferred():
    @task.vertex_step(docker=PARENT_ONLY, deferrable=False)
    def blocking(x: int):
        print(f"computing {x} squared")
        return x * x

    blocking(12)


vx_not_deferred()


# A pinned requirement the test virtualenv holds at another version: the step sees the pin only
# when it runs in the image built for it (a built image runs in a container, in any fake mode).
PINNED = DockerSettings(parent_image=BASE, requirements=["tabulate==0.9.0"])


@dag(schedule=None)
def vx_pinned_requirement():
    @task.vertex_step(docker=PINNED)
    def pinned():
        import tabulate

        return tabulate.__version__

    pinned()


vx_pinned_requirement()


@dag(schedule=None, default_args={"cache": True, "docker": PARENT_ONLY})
def vx_cached():
    """make and total cache (default_args); stamp has cache=False and always runs."""

    @task.vertex_step
    def make(n: int):
        import numpy

        return numpy.arange(n, dtype="float64")  # an artifact: a reference downstream

    @task.vertex_step
    def total(values):
        return float(values.sum())

    @task.vertex_step(cache=False)
    def stamp(value):
        return f"total {value}"

    stamp(total(make(1000)))


vx_cached()


@dag(schedule=None)
def vx_capacity():
    """One T4 step: the tests take the capacity of its cheapest machine away."""

    @task.vertex_step(docker=PARENT_ONLY, resources=ResourceSettings(gpu_count=1, gpu_type="T4"))
    def doubled(n: int):  # a name no other test's job filter matches: the fake keeps every job
        return n * 2

    doubled(21)


vx_capacity()


@dag(schedule=None)
def vx_flex_start():
    """One L4 step queued with Dynamic Workload Scheduler: the tests hold its machine back."""

    @task.vertex_step(docker=PARENT_ONLY, resources=ResourceSettings(gpu_count=1, gpu_type="L4"),
                      flex_start=True, flex_start_max_wait=timedelta(hours=1))  # fmt: skip
    def queued(n: int):
        return n * 2

    queued(21)


vx_flex_start()


@dag(schedule=None)
def vx_flex_start_short_wait():
    """The same step waiting at most 2 s: its machine's stockout outlasts the wait."""

    @task.vertex_step(docker=PARENT_ONLY, resources=ResourceSettings(gpu_count=1, gpu_type="L4"),
                      flex_start=True, flex_start_max_wait=2)  # fmt: skip
    def impatient(n: int):
        return n * 2

    impatient(21)


vx_flex_start_short_wait()
