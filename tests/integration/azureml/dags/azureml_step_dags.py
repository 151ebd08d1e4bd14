"""DAGs the Azure ML integration tests run with dag.test() on the emulated cloud."""

from __future__ import annotations

import json
import os
from datetime import timedelta

import fault_operators
from airflow.sdk import TaskGroup, dag, task
from step_helpers import wait_for_file

from airflow_stepop import AzureMLStepOperator, DockerSettings, ResourceSettings
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


def make_weights(n: int):
    import numpy

    return numpy.arange(n, dtype="float64")


@dag(schedule=None)
def aml_pipeline():
    weights = AzureMLStepOperator(
        task_id="weights",
        python_callable=make_weights,
        op_args=[100_000],
        docker=PARENT_ONLY,
        resources=ResourceSettings(cpu_count=2, memory="4GiB"),
    )

    @task.azureml_step(docker=PARENT_ONLY, environment={"MODEL_NAME": "linear"})
    def fit(weights):
        from pathlib import Path

        model = Path("model")
        (model / "layers").mkdir(parents=True)
        (model / "layers" / "w.txt").write_text(str(float(weights.sum())))
        (model / "name.txt").write_text(os.environ["MODEL_NAME"])
        return model

    @task.azureml_step(docker=PARENT_ONLY)
    def score(model, weights, k: int):
        total = float((model / "layers" / "w.txt").read_text())
        return {"k": k, "score": total * k, "name": (model / "name.txt").read_text(),
                "n": int(weights.size)}  # fmt: skip

    @task
    def check(scores, weights_ref, model_ref):
        _remember(
            "check",
            {
                "scores": list(scores),
                "loaded": float(weights_ref.load().sum()),
                "model": sorted(p.name for p in model_ref.load().rglob("*") if p.is_file()),
            },
        )

    model = fit(weights.output)
    scores = score.partial(model=model, weights=weights.output).expand(k=[1, 2])
    check(scores, weights.output, model)


aml_pipeline()


@dag(schedule=None)
def aml_step_raises():
    @task.azureml_step(docker=PARENT_ONLY, on_failure_callback=_remember_failure)
    def explode(x: int):
        raise ValueError(f"bad value {x}")

    explode(42)


aml_step_raises()

LOUD_LINES = 45_000  # of 107 bytes: 4.6 MiB, more than four of the relay's 1 MiB reads


@dag(schedule=None)
def aml_loud_failure():
    @task.azureml_step(docker=PARENT_ONLY, on_failure_callback=_remember_failure)
    def shout(lines: int):
        filler = "x" * 99
        for i in range(lines):
            print(f"{i:06d} {filler}")
        print("the last words before the raise", flush=True)
        raise ValueError("loud and failed")

    shout(LOUD_LINES)


aml_loud_failure()


@dag(schedule=None)
def aml_capacity():
    @task.azureml_step(
        docker=PARENT_ONLY, instance_type="Standard_NC6s_v3", on_failure_callback=_remember_failure
    )
    def needs_gpu():
        return "never runs"

    needs_gpu()


aml_capacity()


@dag(schedule=None)
def aml_misspelt_size():
    @task.azureml_step(
        docker=PARENT_ONLY, instance_type="Standard_DS3v2", on_failure_callback=_remember_failure
    )
    def typo():
        return 1

    typo()


aml_misspelt_size()


class LosesWorkerAfterSubmit(fault_operators.LosesWorkerAfterSubmit, AzureMLStepOperator):
    pass


@dag(schedule=None)
def aml_retry_reattaches():
    LosesWorkerAfterSubmit(
        task_id="held",
        python_callable=held_step,
        op_args=[f"{RESULTS}/release"],
        docker=PARENT_ONLY,
        retries=1,
        retry_delay=timedelta(seconds=0),
    )


aml_retry_reattaches()


@dag(schedule=None)
def aml_timeout():
    @task.azureml_step(
        docker=PARENT_ONLY,
        execution_timeout=timedelta(seconds=8),
        # no max_runtime: its default (the deadline plus 5 minutes) must not end the job first
        on_failure_callback=_remember_failure,
    )
    def sleeper():
        import time

        time.sleep(300)

    sleeper()


aml_timeout()


@dag(schedule=None)
def aml_spot_resumes():
    @task.azureml_step(docker=PARENT_ONLY, spot=True, max_runtime=600)
    def resumable(checkpointed: str):
        import time
        from pathlib import Path

        checkpoints = Path(os.environ["STEPOP_CHECKPOINT_DIR"])
        state = checkpoints / "epoch.txt"
        if state.exists():
            return f"resumed at epoch {state.read_text()}"
        state.write_text("7")
        open(checkpointed, "w").close()  # only now does the test let the preemption come
        time.sleep(120)  # the preemption comes before this ends
        return "never preempted"

    resumable(f"{RESULTS}/checkpointed")


aml_spot_resumes()


@dag(schedule=None)
def aml_two_nodes():
    @task.azureml_step(
        docker=PARENT_ONLY,
        instance_count=2,
        processes_per_instance=2,
        instance_type="Standard_DS3_v2",
    )
    def ranks():
        names = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "MASTER_ADDR")
        print("rank", os.environ["RANK"], "of", os.environ["WORLD_SIZE"])
        return {name: os.environ[name] for name in names}

    ranks()


aml_two_nodes()


@dag(schedule=None)
def aml_container():
    @task.azureml_step(docker=PARENT_ONLY, tags={"stepop_fake_mode": "container"})
    def in_container(xs: list):
        import sys

        return {"sum": sum(xs), "python": sys.executable}

    in_container([1, 2, 3])


aml_container()


@dag(schedule=None)
def aml_named_clusters():
    @task.azureml_step(
        docker=PARENT_ONLY, compute="gpu-cluster", resources=ResourceSettings(gpu_count=1)
    )
    def on_gpus():
        return "ran on the cluster"

    @task.azureml_step(
        docker=PARENT_ONLY,
        compute="cpu-cluster",
        resources=ResourceSettings(gpu_count=1),
        on_failure_callback=_remember_failure,
    )
    def too_small():
        return "never runs"

    @task.azureml_step(
        docker=PARENT_ONLY,
        compute="gpu-clustr",
        on_failure_callback=lambda context: _remember("missing", str(context["exception"])),
    )
    def misspelt():
        return "never runs"

    # resources every step of a group shares: the error names them as written
    with TaskGroup("shared", default_args={"step_resources": ResourceSettings(gpu_count=1)}):

        @task.azureml_step(
            docker=PARENT_ONLY,
            compute="cpu-cluster",
            on_failure_callback=lambda context: _remember("shared", str(context["exception"])),
        )
        def too_small_shared():
            return "never runs"

        too_small_shared()

    on_gpus()
    too_small()
    misspelt()


aml_named_clusters()


@dag(schedule=None)
def aml_spot_clusters():
    @task.azureml_step(
        docker=PARENT_ONLY, compute="gpu-cluster", spot=True, on_failure_callback=_remember_failure
    )
    def spot_on_dedicated():
        return "never runs"

    @task.azureml_step(docker=PARENT_ONLY, compute="lowpri-gpu-cluster")
    def on_low_priority():
        return "ran on low-priority VMs"

    spot_on_dedicated()
    on_low_priority()


aml_spot_clusters()


@dag(schedule=None)
def aml_service_build():
    built_by_service = DockerSettings(parent_image=BASE, environment={"STEPOP_BUILT_BY": "azureml"})

    # no mode tag: the fake builds the image in any mode, and a built image runs in a container
    @task.azureml_step(docker=built_by_service)
    def built():
        return os.environ["STEPOP_BUILT_BY"]

    built()


aml_service_build()


@dag(schedule=None)
def aml_spot_retry_resumes():
    @task.azureml_step(docker=PARENT_ONLY, spot=True, retries=1, retry_delay=timedelta(seconds=0))
    def flaky_training():
        from pathlib import Path

        state = Path(os.environ["STEPOP_CHECKPOINT_DIR"]) / "epoch.txt"
        if state.exists():
            return f"try 2 resumed at epoch {state.read_text()}"
        state.write_text("3")
        raise RuntimeError("the first try dies after its checkpoint")

    flaky_training()


aml_spot_retry_resumes()


class LosesWorkerInSubmit(AzureMLStepOperator):
    """A worker lost right after the job was created, before the try could record it."""

    def make_backend(self):
        backend = super().make_backend()
        submit = backend.submit

        def submit_then_die(request):
            submit(request)
            if request.job_name.endswith("-t1"):
                raise RuntimeError("simulated: worker lost right after creating the job")
            raise AssertionError("try 2 must re-attach, not create another job")

        backend.submit = submit_then_die
        return backend

    def defer(self, **kwargs):
        # Only a try that re-attached gets here; until then the try-1 job must stay alive,
        # or the retry's List call would find no live job.
        open(f"{RESULTS}/release", "w").close()
        super().defer(**kwargs)


@dag(schedule=None)
def aml_lost_worker():
    LosesWorkerInSubmit(
        task_id="held",
        python_callable=held_step,
        op_args=[f"{RESULTS}/release"],
        docker=PARENT_ONLY,
        retries=1,
        retry_delay=timedelta(seconds=0),
    )


aml_lost_worker()


class FailsAfterSubmit(fault_operators.FailsAfterSubmit, AzureMLStepOperator):
    pass


@dag(schedule=None)
def aml_failure_after_submit():
    FailsAfterSubmit(
        task_id="orphan",
        python_callable=wait_for_file,
        op_args=[f"{RESULTS}/never", 600],  # runs until it is cancelled
        docker=PARENT_ONLY,
        on_failure_callback=_remember_failure,
    )


aml_failure_after_submit()


class LosesWorkerAfterSuccess(fault_operators.LosesWorkerAfterSuccess, AzureMLStepOperator):
    pass


@dag(schedule=None)
def aml_retry_after_success():
    LosesWorkerAfterSuccess(
        task_id="paid_once",
        python_callable=answer_once,
        docker=PARENT_ONLY,
        retries=1,
        retry_delay=timedelta(seconds=0),
    )


aml_retry_after_success()


@dag(schedule=None)
def aml_missing_container():
    @task.azureml_step(
        docker=PARENT_ONLY,
        artifact_root="abfs://no-such-container-stepop/steps",
        on_failure_callback=_remember_failure,
    )
    def nowhere():
        return 1

    nowhere()


aml_missing_container()


# A pinned requirement the test virtualenv holds at another version: the step sees the pin only
# when it runs in the image built for it (Azure ML builds it; a built image runs in a container).
PINNED = DockerSettings(parent_image=BASE, requirements=["tabulate==0.9.0"])


@dag(schedule=None)
def aml_pinned_requirement():
    @task.azureml_step(docker=PINNED)
    def pinned():
        import tabulate

        return tabulate.__version__

    pinned()


aml_pinned_requirement()


@dag(schedule=None, default_args={"cache": True, "docker": PARENT_ONLY})
def aml_cached():
    """make and total cache (default_args); stamp has cache=False and always runs."""

    @task.azureml_step
    def make(n: int):
        import numpy

        return numpy.arange(n, dtype="float64")  # an artifact: a reference downstream

    @task.azureml_step
    def total(values):
        return float(values.sum())

    @task.azureml_step(cache=False)
    def stamp(value):
        return f"total {value}"

    stamp(total(make(1000)))


aml_cached()


@dag(schedule=None)
def aml_capacity_failover():
    """One serverless T4 step: the tests take the capacity of its cheapest size away."""

    @task.azureml_step(docker=PARENT_ONLY, resources=ResourceSettings(gpu_count=1, gpu_type="T4"))
    def fit(n: int):
        return n * 2

    fit(21)


aml_capacity_failover()


@dag(schedule=None)
def aml_capacity_queue():
    """The same T4 step, first in its compute's queue: the tests hold its size's VMs back."""

    @task.azureml_step(docker=PARENT_ONLY, resources=ResourceSettings(gpu_count=1, gpu_type="T4"),
                       job_priority="high")  # fmt: skip
    def fit(n: int):
        return n * 2

    fit(21)


aml_capacity_queue()
