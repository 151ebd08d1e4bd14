"""One DAG per backend whose one step returns what it computed from the run's conf.

tests/e2e/test_recreated_run.py triggers each with a fixed run_id and ``{"value": 1}``, deletes
the run, and triggers it again with the same run_id and ``{"value": 2}``: the second run must
make a new job and return the new value's result. The step also returns the try id its job was
given (``STEPOP_TRY_ID``), so the test can tell which task instance's job computed it.
"""

from __future__ import annotations

import os

from airflow.sdk import dag, task

IMAGE = os.environ.get("STEPOP_RECREATED_IMAGE", "127.0.0.1:5000/stepop-base/python:3.11-bookworm")
BACKENDS = {
    "local": {},
    "sagemaker": {"image_uri": IMAGE},
    "vertex": {"image_uri": IMAGE},
    "azureml": {"image_uri": IMAGE},
}


def compute(params: dict, run_id: str) -> dict:
    """The step: what it computed from the run's conf, and which run and try it ran for."""
    value = int(params["value"])
    return {
        "value": value,
        "squared": value * value,
        "run_id": run_id,
        "try_id": os.environ.get("STEPOP_TRY_ID", ""),
    }


def recreated_run_dag(backend: str, arguments: dict) -> None:
    @dag(
        dag_id=f"recreated_run_{backend}",
        schedule=None,
        params={"value": 0},
        tags=["airflow-stepop", "recreated-run-test"],
    )
    def recreated_run():
        getattr(task, f"{backend}_step")(task_id="compute", **arguments)(compute)()

    recreated_run()


for _backend, _arguments in BACKENDS.items():
    recreated_run_dag(_backend, _arguments)
