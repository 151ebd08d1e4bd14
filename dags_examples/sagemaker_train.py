"""prepare -> train (one GPU) -> evaluate, each step a SageMaker training job.

The same pipeline as ``train_pipeline.py`` with ``task.sagemaker_step``: the training step asks
for one GPU and 16 GiB, which the packaged catalog resolves to the cheapest fitting instance
(ml.g4dn.xlarge, one T4), and runs in an environment image built from a CUDA parent image plus
one extra requirement. The image is built and pushed once; editing a step's code never rebuilds
it (code travels in the content-addressed bundle). Data and the model pass by reference in S3.

Set up (see docs/sagemaker.md): an ``aws_default`` connection, ``[stepop] artifact_root`` =
``s3://<bucket>/stepop``, ``[stepop] sagemaker_role`` = the execution role. To try it on the
emulated cloud: ``make cloud-up``, then the variables listed in docs/sagemaker.md.
"""

from __future__ import annotations

import os
from datetime import timedelta

from airflow.sdk import dag, task
from stepop_example import model

from airflow_stepop import DockerSettings, ResourceSettings

# A CUDA image with PyTorch and Python 3.11 (the worker's minor version: steps defined in a DAG
# file travel pickled). STEPOP_EXAMPLE_PARENT_IMAGE swaps it, e.g. for the emulated cloud.
PARENT = os.environ.get(
    "STEPOP_EXAMPLE_PARENT_IMAGE", "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime"
)
ENVIRONMENT = DockerSettings(parent_image=PARENT, requirements=["threadpoolctl>=3.5"])


# A retry returns a finished job's result without a new job, and mends an Airflow scheduler
# race that quick tasks hit under load (docs/reliability.md); it starts no job, so it is short.
RETRY_ONCE = {"retries": 1, "retry_delay": timedelta(seconds=10)}


@dag(schedule=None, default_args=RETRY_ONCE, tags=["airflow-stepop", "example", "sagemaker"])
def stepop_sagemaker_train():
    @task.sagemaker_step(
        docker=ENVIRONMENT,
        multiple_outputs=True,
        resources=ResourceSettings(cpu_count=2, memory="8GiB"),
    )
    def prepare(n_samples: int) -> dict:
        return {
            "train": model.make_dataset(n_samples, seed=1),
            "test": model.make_dataset(n_samples // 5, seed=2),
        }

    @task.sagemaker_step(
        docker=ENVIRONMENT,
        resources=ResourceSettings(gpu_count=1, memory="16GiB"),
        spot=True,  # checkpoints in $STEPOP_CHECKPOINT_DIR survive a spot interruption
        # the trigger stops the job at 2 h; its MaxRuntimeInSeconds is 2 h + 5 min (only ends
        # a job no triggerer watches), its spot MaxWaitTimeInSeconds twice that
        execution_timeout=timedelta(hours=2),
    )
    def train(train_set):
        return model.train(train_set, epochs=50)

    @task.sagemaker_step(docker=ENVIRONMENT)
    def evaluate(model_dir, test_set) -> dict:
        return model.evaluate(model_dir, test_set)

    @task
    def report(metrics: dict, model_ref) -> None:
        print(f"accuracy {metrics['accuracy']} (trained on {metrics['trained_on']})")
        print(f"model: {model_ref}")

    data = prepare(400_000)
    trained = train(data["train"])
    report(evaluate(trained, data["test"]), trained)


stepop_sagemaker_train()
