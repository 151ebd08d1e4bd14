"""DAGs of the Azure ML integration tests for artifact roots and MLflow inside a step."""

from __future__ import annotations

import json
import os

from airflow.sdk import dag, task

from airflow_stepop import DockerSettings

RESULTS = os.environ.get("STEPOP_TEST_RESULTS", "/tmp")
REGISTRY = os.environ.get("STEPOP_REGISTRY", "127.0.0.1:5000")
PARENT_ONLY = DockerSettings(parent_image=f"{REGISTRY}/stepop-base/python:3.11-bookworm")


def _remember_failure(context):
    with open(f"{RESULTS}/failure.json", "w") as handle:
        json.dump(f"{type(context['exception']).__name__}: {context['exception']}", handle)


@dag(schedule=None, default_args={"on_failure_callback": _remember_failure})
def aml_roots():
    """An array from step to step under whatever [stepop] artifact_root the test sets."""

    @task.azureml_step(docker=PARENT_ONLY)
    def numbers(n: int):
        import numpy

        return numpy.arange(n, dtype="float64")

    @task.azureml_step(docker=PARENT_ONLY)
    def total(data) -> float:
        return float(data.sum())

    @task
    def check(data, whole: float):
        with open(f"{RESULTS}/roots.json", "w") as handle:
            json.dump({"loaded": float(data.load().sum()), "total": whole}, handle)

    data = numbers(50_000)
    check(data, total(data))


@dag(schedule=None)
def aml_mlflow():
    @task.azureml_step(docker=PARENT_ONLY, experiment_name="stepop_mlflow_it")
    def train() -> dict:
        import mlflow  # no set-up: Azure ML's variables point MLflow at the job's run

        mlflow.log_param("learning_rate", 0.01)
        for step, loss in enumerate([0.5, 0.25]):
            mlflow.log_metric("loss", loss, step=step)
        return {"run_id": mlflow.active_run().info.run_id, "job": os.environ["AZUREML_RUN_ID"]}

    train()


aml_roots()
aml_mlflow()
