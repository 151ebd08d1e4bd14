"""A deployment that runs local and SageMaker steps side by side (per-service artifact roots)."""

from __future__ import annotations

import json
import os

from airflow.sdk import dag, task

from airflow_stepop import DockerSettings

RESULTS = os.environ.get("STEPOP_TEST_RESULTS", "/tmp")
REGISTRY = os.environ.get("STEPOP_REGISTRY", "127.0.0.1:5000")
PARENT_ONLY = DockerSettings(parent_image=f"{REGISTRY}/stepop-base/python:3.11-bookworm")


@dag(schedule=None)
def mixed_local_and_sagemaker():
    @task.local_step
    def features(n: int):
        import numpy

        return numpy.arange(n, dtype="float64")  # a file:// artifact

    @task.sagemaker_step(docker=PARENT_ONLY)
    def train(data):
        return data * 2  # an s3:// artifact

    @task.local_step
    def evaluate(weights):
        return float(weights.sum())

    @task
    def keep(score, weights_ref):
        with open(f"{RESULTS}/mixed.json", "w") as handle:
            json.dump({"score": score, "uri": weights_ref.uri}, handle)

    weights = train(features(100_000))
    keep(evaluate(weights), weights)


mixed_local_and_sagemaker()
