"""Faults a worker can meet, as mixins the test DAGs put in front of their backend's operator:
``class FailsAfterSubmit(fault_operators.FailsAfterSubmit, SageMakerStepOperator)``.

This module lives in the DAGs folder so that every test DAG file can import it the way a DAG
file imports its helpers: the e2e DAG processor parses local_step_dags.py with this folder on
sys.path, and tests/conftest.py puts it there for the DAG files the other tests import and run
with dag.test(). It imports nothing: each DAG file supplies the operator.
"""

from __future__ import annotations

import os
import time


class LosesWorkerAfterSubmit:
    """Simulates a worker that dies after submitting a job and before deferring (try 1)."""

    def execute(self, context):
        self._try = context["ti"].try_number
        return super().execute(context)

    def defer(self, **kwargs):
        if self._try == 1:
            raise RuntimeError("simulated: worker lost between submit and defer")
        # only now may the try-1 job finish (the results folder is read now: each test has its own)
        results = os.environ.get("STEPOP_TEST_RESULTS", "/tmp")
        open(f"{results}/release", "w").close()
        super().defer(**kwargs)


class LosesWorkerAfterFailover:
    """Try 1's worker fails over to the next machine type (its job ``...-a2`` submitted) and
    dies before deferring; the retry must re-attach to that job, not start the list again."""

    def execute(self, context):
        self._try = context["ti"].try_number
        return super().execute(context)

    def execute_complete(self, context, event):
        self._try = context["ti"].try_number
        return super().execute_complete(context, event)

    def defer(self, **kwargs):
        failed_over = kwargs["trigger"].handle["job_id"].endswith("-a2")
        if self._try == 1 and failed_over:
            raise RuntimeError("simulated: worker lost after failing over, before deferring")
        if self._try == 2:  # only now may the attempt's job finish
            results = os.environ.get("STEPOP_TEST_RESULTS", "/tmp")
            open(f"{results}/release", "w").close()
        super().defer(**kwargs)


class ClearedWhileDeferred:
    """Try 1 is cleared while its job runs. A real triggerer stops the job (the trigger's
    on_kill) about a second after the scheduler has started try 2, which has by then
    re-attached to it: here try 2 stops it itself, after re-attaching, before deferring."""

    def execute(self, context):
        self._try = context["ti"].try_number
        return super().execute(context)

    def defer(self, **kwargs):
        if getattr(self, "_try", None) == 1:
            raise RuntimeError("simulated: try 1 cleared before it deferred")
        handle = kwargs["trigger"].handle
        if handle.get("earlier_try"):
            self.make_backend().stop(handle)  # try 1's trigger's on_kill, arriving late
            results = os.environ.get("STEPOP_TEST_RESULTS", "/tmp")
            open(f"{results}/release", "w").close()  # the step run again may finish
        super().defer(**kwargs)


class LosesWorkerAfterSuccess:
    """Try 1's worker dies after its job succeeded, before the result reached Airflow."""

    def execute_complete(self, context, event):
        if context["ti"].try_number == 1:
            raise RuntimeError("simulated: worker lost before execute_complete")
        return super().execute_complete(context, event)


class FailsAfterSubmit:
    """Something fails in execute() after the submit; no retry is left."""

    def defer(self, **kwargs):
        raise RuntimeError("simulated: failure after submit")


class KilledWhileSubmitting:
    """The user marks the task failed while ``execute()`` is still on its way to the defer.
    Airflow's task runner answers the SIGTERM by calling ``on_kill`` and lets ``execute()`` go
    on: here the submit comes back only after ``on_kill`` ran (a request in flight), or, with
    ``killed_before_submit``, the kill comes while the job is being prepared."""

    killed_before_submit = False
    # Hold until the test has marked the task, not until its SIGTERM: Airflow sends that at the
    # task process's next heartbeat, seconds later, and refuses the deferral before then.
    held_until_marked = False

    def on_kill(self):
        self._sigterm_seen = True
        super().on_kill()

    def _wait_for_the_kill(self):
        results = os.environ.get("STEPOP_TEST_RESULTS", "/tmp")
        open(f"{results}/{self.dag_id}.submitting", "w").close()  # the test kills the task now
        while not getattr(self, "_sigterm_seen", False):
            if self.held_until_marked and os.path.exists(f"{results}/{self.dag_id}.marked"):
                return
            time.sleep(0.05)  # the signal handler runs in this thread, between two sleeps

    def _prepare(self, *args):
        request = super()._prepare(*args)
        if self.killed_before_submit:
            self._wait_for_the_kill()
        return request

    def make_backend(self):
        backend = super().make_backend()
        submit = backend.submit

        def submit_in_flight(request):
            handle = submit(request)
            if not self.killed_before_submit:
                self._wait_for_the_kill()
            return handle

        backend.submit = submit_in_flight
        return backend
