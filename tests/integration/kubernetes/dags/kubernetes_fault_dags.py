"""DAGs of the Kubernetes fault tests (test_kubernetes_retries.py): a worker lost before its
defer or after its Job succeeded, a failure after the submit with no retry left, the
execution_timeout, a run triggered again under its run_id, and plain steps the API faults hit.
The faults a worker meets are the operator mixins every backend's tests use (fault_operators).
"""

from __future__ import annotations

import os
from datetime import timedelta

import fault_operators
from airflow.sdk import dag, task
from step_helpers import wait_for_file

from airflow_stepop import KubernetesStepOperator
from tests.integration.fault_steps import answer_once, held_step

RESULTS = os.environ.get("STEPOP_TEST_RESULTS", "/tmp")
REGISTRY = os.environ.get("STEPOP_REGISTRY", "127.0.0.1:5000")
BASE = f"{REGISTRY}/stepop-base/python:3.11-bookworm"  # runs in a process on the fake


def _remember_failure(context) -> None:
    with open(f"{RESULTS}/failure.txt", "w") as handle:
        handle.write(f"{type(context['exception']).__name__}: {context['exception']}")


class LosesWorkerAfterSubmit(fault_operators.LosesWorkerAfterSubmit, KubernetesStepOperator):
    pass


@dag(schedule=None)
def k8s_retry_reattaches():
    LosesWorkerAfterSubmit(
        task_id="held", python_callable=held_step, op_args=[f"{RESULTS}/release"],
        image_uri=BASE, retries=1, retry_delay=timedelta(seconds=0),
    )  # fmt: skip


k8s_retry_reattaches()


class LosesWorkerAfterSuccess(fault_operators.LosesWorkerAfterSuccess, KubernetesStepOperator):
    pass


@dag(schedule=None)
def k8s_retry_after_success():
    LosesWorkerAfterSuccess(
        task_id="paid_once", python_callable=answer_once, image_uri=BASE, retries=1,
        retry_delay=timedelta(seconds=0),
    )  # fmt: skip


k8s_retry_after_success()


class FailsAfterSubmit(fault_operators.FailsAfterSubmit, KubernetesStepOperator):
    pass


@dag(schedule=None)
def k8s_failure_after_submit():
    FailsAfterSubmit(
        task_id="orphan", python_callable=wait_for_file, op_args=["/nonexistent/never", 600],
        image_uri=BASE, on_failure_callback=_remember_failure,
    )  # fmt: skip


k8s_failure_after_submit()


@dag(schedule=None)
def k8s_times_out():
    @task.kubernetes_step(
        image_uri=BASE,
        execution_timeout=timedelta(seconds=8),
        on_failure_callback=_remember_failure,
    )  # no max_runtime: its default (the deadline plus 5 minutes) must not end the Job first
    def sleeper():
        import time

        try:
            print("sleeper started", flush=True)
            time.sleep(300)
        finally:  # runs in the pod's grace period, after the Job's delete
            print("sleeper saved its work", flush=True)

    sleeper()


k8s_times_out()


def compute(params: dict, run_id: str) -> dict:
    """What the step computed from the run's conf, and which try's Job computed it."""
    value = int(params["value"])
    return {"value": value, "squared": value * value, "run_id": run_id,
            "try_id": os.environ.get("STEPOP_TRY_ID", "")}  # fmt: skip


@dag(schedule=None, params={"value": 0})
def k8s_recreated_run():
    task.kubernetes_step(task_id="compute", image_uri=BASE)(compute)()


k8s_recreated_run()


@dag(schedule=None)
def k8s_chain():
    @task.kubernetes_step(image_uri=BASE)
    def make(n: int):
        import numpy

        print(f"making {n} ones", flush=True)
        return numpy.ones(n)

    @task.kubernetes_step(image_uri=BASE)
    def total(values):
        print(f"summing {values.size} values", flush=True)
        return float(values.sum())

    total(make(50_000))


k8s_chain()


@dag(schedule=None)
def k8s_not_deferred():
    @task.kubernetes_step(image_uri=BASE, deferrable=False)
    def blocking(x: int):
        print(f"computing {x} squared")
        return x * x

    blocking(12)


k8s_not_deferred()
