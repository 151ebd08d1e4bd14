"""prepare -> train -> evaluate, each step a job on the local backend.

The training data (about 50 MB) and the model directory pass between steps by reference:
XCom holds a few hundred bytes, and the worker never touches the bytes. Change
``task.local_step`` to ``task.sagemaker_step`` (or another service) to move a step to a cloud GPU.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task
from stepop_example import model

from airflow_stepop import ResourceSettings

# A retry returns a finished job's result without a new job, and mends an Airflow scheduler
# race that quick tasks hit under load (docs/reliability.md); it starts no job, so it is short.
RETRY_ONCE = {"retries": 1, "retry_delay": timedelta(seconds=10)}


@dag(schedule=None, default_args=RETRY_ONCE, tags=["airflow-stepop", "example"])
def stepop_train_pipeline():
    @task.local_step(multiple_outputs=True, resources=ResourceSettings(memory="2GiB"))
    def prepare(n_samples: int) -> dict:
        return {
            "train": model.make_dataset(n_samples, seed=1),
            "test": model.make_dataset(n_samples // 5, seed=2),
        }

    @task.local_step(resources=ResourceSettings(gpu_count=1, memory="8GiB"))
    def train(train_set):
        return model.train(train_set, epochs=50)

    @task.local_step
    def evaluate(model_dir, test_set) -> dict:
        return model.evaluate(model_dir, test_set)

    @task
    def report(metrics: dict, model_ref) -> None:
        print(f"accuracy {metrics['accuracy']} (trained on {metrics['trained_on']})")
        print(f"model: {model_ref}")

    data = prepare(400_000)
    trained = train(data["train"])
    report(evaluate(trained, data["test"]), trained)


stepop_train_pipeline()
