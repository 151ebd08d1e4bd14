"""DAGs for the faults that cost money or data: a lost worker after success, a failure after
submit with no retry left, a job its trigger cannot follow. Run with dag.test() on the local
backend."""

from __future__ import annotations

import os
from datetime import timedelta

import fault_operators
from airflow.sdk import dag
from step_helpers import record_pid, wait_for_file

from airflow_stepop import LocalStepOperator
from airflow_stepop.backends.local.backend import LocalBackend

RESULTS = os.environ.get("STEPOP_TEST_RESULTS", "/tmp")


class LosesWorkerAfterSuccess(fault_operators.LosesWorkerAfterSuccess, LocalStepOperator):
    pass


class FailsAfterSubmit(fault_operators.FailsAfterSubmit, LocalStepOperator):
    pass


def count_and_answer(counter: str) -> str:
    with open(counter, "a") as handle:
        handle.write("ran\n")
    return "computed once"


def hold_forever(pid_file: str) -> None:
    record_pid(pid_file)
    wait_for_file("/nonexistent/never", timeout=3600)


@dag(schedule=None)
def retry_after_success_reuses_result():
    LosesWorkerAfterSuccess(
        task_id="paid_once",
        python_callable=count_and_answer,
        op_args=[f"{RESULTS}/runs.txt"],
        retries=1,
        retry_delay=timedelta(seconds=0),
    )


retry_after_success_reuses_result()


@dag(schedule=None)
def failure_after_submit_without_retry():
    FailsAfterSubmit(task_id="orphan", python_callable=hold_forever, op_args=[f"{RESULTS}/o.pid"])


failure_after_submit_without_retry()


class StatusRefused(LocalBackend):
    """A service that refuses the trigger's status calls with an error no retry mends (its
    credentials revoked while the job runs, say); the worker's own calls still work."""

    async def astatuses(self, handles):
        raise PermissionError("simulated: the service refuses status calls")

    async def astatus(self, handle):
        raise PermissionError("simulated: the service refuses status calls")


class Unwatchable(LocalStepOperator):
    def make_backend(self):
        return StatusRefused(**super().make_backend().serialize())


@dag(schedule=None)
def unwatchable_job():
    Unwatchable(
        task_id="unwatched",
        python_callable=hold_forever,
        op_args=[f"{RESULTS}/u.pid"],
        retries=1,
        retry_delay=timedelta(seconds=0),
    )


unwatchable_job()
