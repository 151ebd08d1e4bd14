"""prepare -> train (one GPU, spot) -> evaluate, each step a Vertex AI CustomJob.

The same pipeline as ``sagemaker_train.py`` with ``task.vertex_step``: the training step asks
for one GPU and 16 GiB, which the packaged catalog resolves to the cheapest legal machine
(g2-standard-4 with one NVIDIA_L4), on Spot VMs; its checkpoints in
``$STEPOP_CHECKPOINT_DIR`` survive a preemption. Every step runs in an environment image built
from a CUDA parent image plus one extra requirement, built and pushed once (editing a step's code
never rebuilds it). Data and the model pass by reference in GCS; the jobs read them through the
/gcs mount, so the image needs no Google SDK. ``evaluate`` is mapped over two test sets with
``.expand()``, and ``holdout`` is a classic ``VertexStepOperator``.

Set up (see docs/vertex.md): a ``google_cloud_default`` connection and ``[stepop]
artifact_root`` = ``gs://<bucket>/stepop``. To try it on the emulated cloud: ``make cloud-up``,
then the variables listed in docs/vertex.md.
"""

from __future__ import annotations

import os
from datetime import timedelta

from airflow.sdk import dag, task
from stepop_example import model

from airflow_stepop import DockerSettings, ResourceSettings, VertexStepOperator

# A CUDA image with PyTorch and Python 3.11 (the worker's minor version: steps defined in a DAG
# file travel pickled). STEPOP_EXAMPLE_PARENT_IMAGE swaps it, e.g. for the emulated cloud.
PARENT = os.environ.get(
    "STEPOP_EXAMPLE_PARENT_IMAGE", "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime"
)
ENVIRONMENT = DockerSettings(parent_image=PARENT, requirements=["threadpoolctl>=3.5"])


# A retry returns a finished job's result without a new job, and mends an Airflow scheduler
# race that quick tasks hit under load (docs/reliability.md); it starts no job, so it is short.
RETRY_ONCE = {"retries": 1, "retry_delay": timedelta(seconds=10)}


@dag(schedule=None, default_args=RETRY_ONCE, tags=["airflow-stepop", "example", "vertex"])
def stepop_vertex_train():
    @task.vertex_step(
        docker=ENVIRONMENT,
        resources=ResourceSettings(cpu_count=2, memory="8GiB"),
    )
    def prepare(n_samples: int, seed: int):
        return model.make_dataset(n_samples, seed=seed)

    @task.vertex_step(
        docker=ENVIRONMENT,
        resources=ResourceSettings(gpu_count=1, memory="16GiB"),
        spot=True,  # checkpoints in $STEPOP_CHECKPOINT_DIR survive a preemption
        # the trigger cancels the job at 2 h; its scheduling.timeout is 2 h 5 min (a backstop)
        execution_timeout=timedelta(hours=2),
    )
    def train(train_set):
        return model.train(train_set, epochs=50)

    @task.vertex_step(docker=ENVIRONMENT)
    def evaluate(model_dir, test_set) -> dict:
        return model.evaluate(model_dir, test_set)

    trained = train(prepare(400_000, seed=1))
    test_sets = [prepare.override(task_id=f"prepare_test_{s}")(80_000, seed=s) for s in (2, 3)]
    metrics = evaluate.partial(model_dir=trained).expand(test_set=test_sets)
    holdout = VertexStepOperator(  # the classic operator: any importable function
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


stepop_vertex_train()
