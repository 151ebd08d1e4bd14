"""Faults the tests set, the same on every cloud: at a moment the step reaches (not after a
delay), and jobs submitted straight through a backend (no DAG) for the tests that drive a
trigger themselves. The faults a worker meets are operator mixins in the DAGs folder
(tests/e2e/dags/fault_operators.py), where every test DAG file can import them."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tests.waiting import wait_for


@contextlib.contextmanager
def preempted_once_checkpointed(ctl: Any, checkpointed: Path, match: str) -> Iterator[None]:
    """While the block runs, preempt the job named like ``match`` once its step has written
    ``checkpointed`` (each fake checks preempt rules all along a running attempt).

    A preemption at a fixed delay after the attempt's start came before the checkpoint when
    the step was slow to start (a loaded CI machine). If the block ends first, no rule is added;
    a failure to add it fails the block's test.
    """
    ended, failed = threading.Event(), []

    def preempt() -> None:
        try:
            wait_for(lambda: checkpointed.exists() or ended.is_set(), 300, "the checkpoint")
            if checkpointed.exists():
                ctl.add_faults({"kind": "preempt", "after_seconds": 0, "match": match})
        except BaseException as exc:
            failed.append(exc)

    preempter = threading.Thread(target=preempt, daemon=True)
    preempter.start()
    try:
        yield
    finally:
        ended.set()
        preempter.join(30)
    assert not failed, failed


# A job without a DAG, for the tests that run its trigger themselves.


def submit_step(
    backend: Any,
    function: Callable[..., Any],
    args: Sequence[Any],
    *,
    root: str,
    conn_id: str | None,
    dag_id: str,
    task_id: str,
) -> dict[str, Any]:
    """Stage ``function(*args)`` under ``root`` as try 1 of a task in a new run and submit it
    straight through ``backend`` (no DAG, no operator): the job's handle."""
    from airflow_stepop.artifacts.storage import worker_storage
    from airflow_stepop.backends.base import JobRequest
    from airflow_stepop.backends.naming import job_name, task_key
    from airflow_stepop.packaging.staging import StepIdentity, stage_step

    run_id = f"run-{uuid.uuid4().hex[:6]}"
    key = task_key(dag_id, run_id, task_id, -1)
    step = StepIdentity(dag_id, run_id, task_id, -1, 1)
    storage = worker_storage(conn_id)
    staged = stage_step(function, list(args), {}, root=root, step=step, storage=storage)
    request = JobRequest(job_name(key, 1), key, staged.spec_uri, staged.run_uri, staged.code_uri)
    return backend.submit(request)


def trigger_for(backend: Any, handle: dict[str, Any], **kwargs: Any) -> Any:
    """The trigger an operator defers to for the job of ``handle`` (with its backend given by
    path, as the operator gives it), polling every 0.2 s."""
    from airflow_stepop.triggers.step_job import StepJobTrigger

    kind = type(backend)
    return StepJobTrigger(
        backend_path=f"{kind.__module__}.{kind.__qualname__}",
        backend_kwargs=backend.serialize(),
        handle=handle,
        poll_interval=0.2,
        **kwargs,
    )
