"""A DAG file that reads a connection at module level, as DAG files do, and a step that uses
it: the step is pickled by value with the connection (tests/e2e/test_secret_steps.py sets it;
without it, the file parses with none)."""

from __future__ import annotations

import os

from airflow.sdk import BaseHook, dag, task

RESULTS = os.environ.get("STEPOP_TEST_RESULTS", "/tmp")
WAREHOUSE = (
    BaseHook.get_connection("stepop_warehouse")
    if "AIRFLOW_CONN_STEPOP_WAREHOUSE" in os.environ
    else None
)


def _remember_failure(context):
    with open(f"{RESULTS}/failure.txt", "w") as handle:
        handle.write(f"{type(context['exception']).__name__}: {context['exception']}")


@dag(schedule=None)
def connection_read_at_module_level():
    @task.local_step(on_failure_callback=_remember_failure)
    def count_rows():
        return WAREHOUSE.host

    count_rows()


connection_read_at_module_level()
