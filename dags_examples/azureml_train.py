"""prepare -> train (one GPU, Spot) -> evaluate, each step an Azure ML command job.

The same pipeline as ``vertex_train.py`` with ``task.azureml_step``: the training step asks for
one GPU and 16 GiB, which the packaged catalog resolves to the cheapest fitting VM size
(Standard_NC4as_T4_v3, one T4) on serverless compute, in the Spot tier (low-priority price);
its checkpoints in ``$STEPOP_CHECKPOINT_DIR`` survive a preemption. Every step runs in an
environment image built from a CUDA parent image plus one extra requirement, built once (by the
worker's engine, or by Azure ML itself where the worker has none); editing a step's code never
rebuilds it. Data and the model pass by reference in Azure Blob Storage; the jobs get them as
mounted job inputs, so the image needs no Azure SDK. ``evaluate`` is mapped over two test sets
with ``.expand()``, and ``holdout`` is a classic ``AzureMLStepOperator``.

Set up (see docs/azureml.md): an ``azureml_default`` connection and ``[stepop] artifact_root`` =
``azureml://datastores/workspaceblobstore/paths/stepop`` (the workspace's default datastore) or
``abfs://<container>/stepop``. To try it on the emulated cloud:
``make cloud-up``, then the variables listed in docs/azureml.md.
"""

from __future__ import annotations

import os
from datetime import timedelta

from airflow.sdk import dag, task
from stepop_example import model

from airflow_stepop import AzureMLStepOperator, DockerSettings, ResourceSettings

# A CUDA image with PyTorch and Python 3.11 (the worker's minor version: steps defined in a DAG
# file travel pickled). STEPOP_EXAMPLE_PARENT_IMAGE swaps it, e.g. for the emulated cloud.
PARENT = os.environ.get(
    "STEPOP_EXAMPLE_PARENT_IMAGE", "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime"
)
ENVIRONMENT = DockerSettings(parent_image=PARENT, requirements=["threadpoolctl>=3.5"])


# A retry returns a finished job's result without a new job, and mends an Airflow scheduler
# race that quick tasks hit under load (docs/reliability.md); it starts no job, so it is short.
RETRY_ONCE = {"retries": 1, "retry_delay": timedelta(seconds=10)}


@dag(schedule=None, default_args=RETRY_ONCE, tags=["airflow-stepop", "example", "azureml"])
def stepop_azureml_train():
    @task.azureml_step(
        docker=ENVIRONMENT,
        resources=ResourceSettings(cpu_count=2, memory="8GiB"),
    )
    def prepare(n_samples: int, seed: int):
        return model.make_dataset(n_samples, seed=seed)

    @task.azureml_step(
        docker=ENVIRONMENT,
        resources=ResourceSettings(gpu_count=1, memory="16GiB"),
        spot=True,  # job_tier Spot: checkpoints in $STEPOP_CHECKPOINT_DIR survive a preemption
        # the trigger cancels the job at 2 h; its limits.timeout is 2 h 5 min (a backstop)
        execution_timeout=timedelta(hours=2),
    )
    def train(train_set):
        return model.train(train_set, epochs=50)

    @task.azureml_step(docker=ENVIRONMENT)
    def evaluate(model_dir, test_set) -> dict:
        return model.evaluate(model_dir, test_set)

    trained = train(prepare(400_000, seed=1))
    test_sets = [prepare.override(task_id=f"prepare_test_{s}")(80_000, seed=s) for s in (2, 3)]
    metrics = evaluate.partial(model_dir=trained).expand(test_set=test_sets)
    holdout = AzureMLStepOperator(  # the classic operator: any importable function
        task_id="holdout",
        python_callable=model.evaluate,
        op_args=[trained, prepare.override(task_id="prepare_holdout")(20_000, seed=9)],
        docker=ENVIRONMENT,
    )

    @task
    def report(metrics: list[dict], holdout: dict, model_ref) -> None:
        for m in [*metrics[:], holdout]:  # a slice: all mapped results in one call
            print(f"accuracy {m['accuracy']} (trained on {m['trained_on']})")
        print(f"model: {model_ref}")

    report(metrics, holdout.output, trained)


stepop_azureml_train()
