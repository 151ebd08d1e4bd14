"""prepare -> train (one GPU) -> evaluate, each step a Job on a Kubernetes cluster.

The same pipeline as ``vertex_train.py`` with ``task.kubernetes_step``: the training step asks
for one GPU and 16 GiB, which become its container's requests and limits (``nvidia.com/gpu: 1``)
and the GPU node pool's toleration; the scheduler places it on a node with room. Every step
runs in a CUDA image with PyTorch as it is (a parent image alone: no build). Data and the model
pass by reference in S3: the pods read and write them through URLs the worker signs for each
Job, so the image needs no AWS SDK and the pods no credentials. ``evaluate`` is mapped over two
test sets with ``.expand()``, and ``holdout`` is a classic ``KubernetesStepOperator``.

Set up (see docs/kubernetes.md): a ``kubernetes_default`` connection, an ``aws_default`` one for
the bucket, and ``[stepop] kubernetes_artifact_root`` = ``s3://<bucket>/stepop``. To try it on
the emulated cluster: ``make cloud-up``, then the variables listed in docs/kubernetes.md.
"""

from __future__ import annotations

import os
from datetime import timedelta

from airflow.sdk import dag, task
from stepop_example import model

from airflow_stepop import DockerSettings, KubernetesStepOperator, ResourceSettings

# A CUDA image with PyTorch and Python 3.11 (the worker's minor version: steps defined in a DAG
# file travel pickled). STEPOP_EXAMPLE_PARENT_IMAGE swaps it, e.g. for the emulated cluster.
PARENT = os.environ.get(
    "STEPOP_EXAMPLE_PARENT_IMAGE", "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime"
)
ENVIRONMENT = DockerSettings(parent_image=PARENT)

# A retry returns a finished job's result without a new Job (docs/reliability.md).
RETRY_ONCE = {"retries": 1, "retry_delay": timedelta(seconds=10)}


@dag(schedule=None, default_args=RETRY_ONCE, tags=["airflow-stepop", "example", "kubernetes"])
def stepop_kubernetes_train():
    @task.kubernetes_step(
        docker=ENVIRONMENT, resources=ResourceSettings(cpu_count=2, memory="8GiB")
    )
    def prepare(n_samples: int, seed: int):
        return model.make_dataset(n_samples, seed=seed)

    @task.kubernetes_step(
        docker=ENVIRONMENT,
        resources=ResourceSettings(gpu_count=1, memory="16GiB"),
        # the trigger deletes the Job at 2 h; its activeDeadlineSeconds is 2 h 5 min (a backstop)
        execution_timeout=timedelta(hours=2),
    )
    def train(train_set):
        return model.train(train_set, epochs=50)

    @task.kubernetes_step(docker=ENVIRONMENT)
    def evaluate(model_dir, test_set) -> dict:
        return model.evaluate(model_dir, test_set)

    trained = train(prepare(400_000, seed=1))
    test_sets = [prepare.override(task_id=f"prepare_test_{s}")(80_000, seed=s) for s in (2, 3)]
    metrics = evaluate.partial(model_dir=trained).expand(test_set=test_sets)
    holdout = KubernetesStepOperator(  # the classic operator: any importable function
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


stepop_kubernetes_train()
