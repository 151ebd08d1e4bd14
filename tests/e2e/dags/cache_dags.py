"""A pipeline whose steps cache (default_args), run by tests/e2e/test_step_cache.py."""

from __future__ import annotations

from airflow.sdk import dag, task

from airflow_stepop import LocalStepOperator


def count_rows(rows: int) -> list[float]:
    return [float(i) for i in range(rows)]


@dag(schedule=None, default_args={"cache": True}, params={"scale": 2})
def cached_pipeline():
    @task.local_step
    def prepare(rows: int):
        import numpy as np

        return np.arange(rows, dtype="float64")  # an artifact: a reference downstream

    @task.local_step
    def train(data, params):
        return {"weights": float(data.sum()) * params["scale"]}

    @task.local_step
    def evaluate(model, data):
        return model["weights"] / len(data)

    @task.local_step(cache=False)
    def report(score):
        return f"score {score}"

    data = prepare(1000)
    score = evaluate(train(data), data)
    report(score)
    LocalStepOperator(task_id="plain_rows", python_callable=count_rows, op_args=[3])


pipeline = cached_pipeline()


@dag(schedule=None)
def cache_probe():
    """One cached step whose result is an artifact, for the miss reasons."""

    @task.local_step(cache=True, cache_expires_after=7 * 24 * 3600)
    def double(rows: int):
        import numpy as np

        return np.arange(rows) * 2

    double(100)


probe = cache_probe()
