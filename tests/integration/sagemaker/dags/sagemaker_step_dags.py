"""DAGs the SageMaker integration tests run with dag.test() on the emulated cloud."""

from __future__ import annotations

import json
import os
from datetime import timedelta

from airflow.sdk import dag, task

from airflow_stepop import DockerSettings, ResourceSettings, SageMakerStepOperator

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

    @task.sagemaker_step(docker=PARENT_ONLY)
    def total(weights):
        return {"sum": float(weights.sum()), "n": int(weights.size)}

    @task
    def check(summary, weights_ref):
        weights = weights_ref.load()
        _remember("check", {"summary": summary, "loaded": float(weights.sum())})

    weights = train(100_000)
    check(total(weights), weights)


sm_pipeline()


@dag(schedule=None)
def sm_step_raises():
    @task.sagemaker_step(docker=PARENT_ONLY, on_failure_callback=_remember_failure)
    def explode(x: int):
        raise ValueError(f"bad value {x}")

    explode(42)


sm_step_raises()
