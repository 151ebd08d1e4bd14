"""DAGs the SageMaker integration tests run with dag.test() on the emulated cloud."""

from __future__ import annotations

import json
import os
from datetime import timedelta

import fault_operators
from airflow.sdk import dag, task
from step_helpers import wait_for_file

from airflow_stepop import DockerSettings, ResourceSettings, SageMakerStepOperator
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


@dag(schedule=None)
def sm_pipeline():
    @task.sagemaker_step(docker=PARENT_ONLY, resources=ResourceSettings(cpu_count=2, memory="4GiB"))
    def train(n: int):
        import numpy

        return numpy.arange(n, dtype="float64")

    @task.sagemaker_step(
        docker=PARENT_ONLY, environment={"LONG_SETTING": "y" * 1500, "SHORT_SETTING": "s"}
    )
    def total(weights):
        settings = (len(os.environ["LONG_SETTING"]), os.environ["SHORT_SETTING"])
        return {"sum": float(weights.sum()), "n": int(weights.size), "env": list(settings)}

    @task
    def check(summary, weights_ref):
        weights = weights_ref.load()
        _remember("check", {"summary": summary, "loaded": float(weights.sum())})

    weights = train(100_000)
    check(total(weights), weights)


sm_pipeline()


@dag(schedule=None)
def sm_times_out():
    @task.sagemaker_step(
        docker=PARENT_ONLY,
        execution_timeout=timedelta(seconds=20),
        on_failure_callback=_remember_failure,
    )  # no max_runtime: its default (the deadline plus 5 minutes) must not end the job first
    def sleeper():
        import time

        try:
            time.sleep(300)
        finally:  # runs in the stop's grace period, after StopTrainingJob has returned
            print("sleeper saved its work")

    sleeper()


sm_times_out()


@dag(schedule=None)
def sm_step_raises():
    @task.sagemaker_step(docker=PARENT_ONLY, on_failure_callback=_remember_failure)
    def explode(x: int):
        raise ValueError(f"bad value {x}")

    explode(42)


sm_step_raises()


class LosesWorkerAfterSubmit(fault_operators.LosesWorkerAfterSubmit, SageMakerStepOperator):
    pass


@dag(schedule=None)
def sm_retry_reattaches():
    LosesWorkerAfterSubmit(
        task_id="held",
        python_callable=held_step,
        op_args=[f"{RESULTS}/release"],
        docker=PARENT_ONLY,
        retries=1,
        retry_delay=timedelta(seconds=0),
    )


sm_retry_reattaches()


class LosesWorkerAfterSuccess(fault_operators.LosesWorkerAfterSuccess, SageMakerStepOperator):
    pass


class FailsAfterSubmit(fault_operators.FailsAfterSubmit, SageMakerStepOperator):
    pass


@dag(schedule=None)
def sm_retry_after_success():
    LosesWorkerAfterSuccess(
        task_id="paid_once",
        python_callable=answer_once,
        docker=PARENT_ONLY,
        retries=1,
        retry_delay=timedelta(seconds=0),
    )


sm_retry_after_success()


@dag(schedule=None)
def sm_failure_after_submit():
    FailsAfterSubmit(
        task_id="orphan",
        python_callable=wait_for_file,
        op_args=["/nonexistent/never", 600],
        docker=PARENT_ONLY,
    )


sm_failure_after_submit()


@dag(schedule=None)
def sm_fails_before_submit():
    import threading

    SageMakerStepOperator(
        task_id="unshippable",
        python_callable=len,
        op_args=[threading.Lock()],  # no materializer, and cloudpickle refuses it
        docker=PARENT_ONLY,
        on_failure_callback=_remember_failure,
    )


sm_fails_before_submit()


@dag(schedule=None)
def sm_missing_image():
    @task.sagemaker_step(
        image_uri=f"{REGISTRY}/stepop/nowhere:v1", on_failure_callback=_remember_failure
    )
    def never_pulled():
        return 1

    never_pulled()


sm_missing_image()


@dag(schedule=None)
def sm_template_fails_to_render():
    SageMakerStepOperator(
        task_id="seeded",
        python_callable=len,
        op_args=[[1]],
        environment={"SEED": "{{ params.missing.key }}"},
        docker=PARENT_ONLY,
    )


sm_template_fails_to_render()


@dag(schedule=None)
def sm_spot_resumes():
    @task.sagemaker_step(docker=PARENT_ONLY, spot=True, max_runtime=600)
    def resumable(checkpointed: str):
        import time
        from pathlib import Path

        checkpoints = Path(os.environ["STEPOP_CHECKPOINT_DIR"])
        state = checkpoints / "epoch.txt"
        if state.exists():
            return f"resumed at epoch {state.read_text()}"
        checkpoints.mkdir(parents=True, exist_ok=True)
        state.write_text("7")
        open(checkpointed, "w").close()  # only now does the test let the interruption come
        time.sleep(120)  # the spot interruption comes before this ends
        return "never interrupted"

    resumable(f"{RESULTS}/checkpointed")


sm_spot_resumes()


@dag(schedule=None)
def sm_two_nodes():
    @task.sagemaker_step(docker=PARENT_ONLY, instance_count=2, instance_type="ml.c5.xlarge")
    def ranks():
        names = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "NODE_RANK")
        print("rank", os.environ["RANK"], "here")
        return {name: os.environ[name] for name in names}

    ranks()


sm_two_nodes()

# An environment with one extra requirement on a parent image; the salt makes each test
# session's image new, so the first run really builds.
ENVIRONMENT = DockerSettings(
    parent_image=BASE,
    requirements=["six==1.17.0"],
    environment={"STEPOP_IT_SALT": os.environ.get("STEPOP_TEST_IMAGE_SALT", "none")},
)


@dag(schedule=None)
def sm_gpu_step_v1():
    @task.sagemaker_step(
        docker=ENVIRONMENT, resources=ResourceSettings(gpu_count=1, memory="16GiB")
    )
    def fit(n: int):
        import numpy
        import six

        return {"weights": numpy.ones(n), "six": six.__version__}

    @task
    def check(result):
        value = result.load(allow_pickle=True)  # a dict holding an array: pickled
        _remember("v1", {"sum": float(value["weights"].sum()), "six": value["six"]})

    check(fit(1000))


sm_gpu_step_v1()


@dag(schedule=None)
def sm_gpu_step_v2():
    @task.sagemaker_step(
        docker=ENVIRONMENT, resources=ResourceSettings(gpu_count=1, memory="16GiB")
    )
    def fit(n: int):  # the same step with an edited body: same environment, no build
        import numpy
        import six

        return {"weights": numpy.ones(n) * 2, "six": six.__version__}

    @task
    def check(result):
        value = result.load(allow_pickle=True)  # a dict holding an array: pickled
        _remember("v2", {"sum": float(value["weights"].sum()), "six": value["six"]})

    check(fit(1000))


sm_gpu_step_v2()


@dag(schedule=None)
def sm_all_options():
    @task.sagemaker_step(
        docker=PARENT_ONLY,
        instance_type="ml.c5.xlarge",
        volume_size_gb=50,
        max_runtime=timedelta(minutes=20),
        keep_alive=timedelta(minutes=10),
        subnets=["subnet-0123456789abcdef0"],
        security_group_ids=["sg-0123456789abcdef0"],
        volume_kms_key="alias/stepop-volume",
        output_kms_key="arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
        tags={"team": "ml", "cost-center": "42"},
    )
    def configured():
        import os

        return os.environ.get("STEPOP_CHECKPOINT_DIR")  # set without spot=True too

    configured()


sm_all_options()


@dag(schedule=None)
def sm_not_deferred():
    @task.sagemaker_step(docker=PARENT_ONLY, deferrable=False)
    def blocking(x: int):
        print(f"computing {x} squared")
        return x * x

    blocking(12)


sm_not_deferred()


# A parent image alone that SageMaker cannot pull (not in ECR, not on the image repository's
# registry): it is copied to the image repository, a new one per test run so the copy is built.
ELSEWHERE = os.environ.get("STEPOP_TEST_BASE_IMAGE", "stepop-base/python:3.11-bookworm")


@dag(schedule=None)
def sm_parent_elsewhere():
    @task.sagemaker_step(
        docker=DockerSettings(parent_image=ELSEWHERE),
        image_repository=os.environ.get("STEPOP_TEST_COPY_REPOSITORY", f"{REGISTRY}/stepop-copy"),
    )
    def copied():
        return "ran"

    @task
    def check(result):
        _remember("copied", result)

    check(copied())


sm_parent_elsewhere()


# A pinned requirement the test virtualenv holds at another version: the step sees the pin only
# when it runs in the image built for it (a built image runs in a container, in any fake mode).
PINNED = DockerSettings(parent_image=BASE, requirements=["tabulate==0.9.0"])


@dag(schedule=None)
def sm_pinned_requirement():
    @task.sagemaker_step(docker=PINNED)
    def pinned():
        import tabulate

        return tabulate.__version__

    pinned()


sm_pinned_requirement()


@dag(schedule=None, default_args={"cache": True, "docker": PARENT_ONLY}, params={"scale": 2})
def sm_cached():
    """Every step caches but report; train reads params (the third run changes them)."""

    @task.sagemaker_step
    def prepare(n: int):
        import numpy

        return numpy.arange(n, dtype="float64")  # an artifact: a reference downstream

    @task.sagemaker_step
    def train(data, params):
        return {"weights": float(data.sum()) * params["scale"]}

    @task.sagemaker_step(multiple_outputs=True)
    def evaluate(model, data):
        return {"score": model["weights"] / data.size, "rows": int(data.size)}

    @task.sagemaker_step
    def square(x: int):
        return x * x

    @task.sagemaker_step(cache=False)
    def report(score, squares):
        return f"score {score}, squares {sorted(squares)}"

    data = prepare(1000)
    scores = evaluate(train(data), data)
    report(scores["score"], square.expand(x=[1, 2, 3]))


sm_cached()


@dag(schedule=None)
def sm_capacity():
    """One T4 step: the tests take the capacity of its cheapest type away."""

    @task.sagemaker_step(docker=PARENT_ONLY, resources=ResourceSettings(gpu_count=1, gpu_type="T4"))
    def fit(n: int):
        return n * 2

    fit(21)


sm_capacity()


class LosesWorkerAfterFailover(fault_operators.LosesWorkerAfterFailover, SageMakerStepOperator):
    pass


@dag(schedule=None)
def sm_capacity_retry():
    """A T4 step whose worker dies right after failing over to the next type; one retry."""
    LosesWorkerAfterFailover(
        task_id="held",
        python_callable=held_step,
        op_args=[f"{RESULTS}/release"],
        docker=PARENT_ONLY,
        resources=ResourceSettings(gpu_count=1, gpu_type="T4"),
        retries=1,
        retry_delay=timedelta(seconds=0),
    )


sm_capacity_retry()

TRAINING_PLAN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/t4-week"


@dag(schedule=None)
def sm_training_plan():
    """A step on a training plan's reserved instances: it waits Pending until they are there."""

    @task.sagemaker_step(docker=PARENT_ONLY, instance_type="ml.g4dn.xlarge",
                         training_plan_arn=TRAINING_PLAN)  # fmt: skip
    def fit(n: int):
        return n * 2

    fit(21)


sm_training_plan()
