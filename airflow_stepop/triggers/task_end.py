"""How a step's trigger ends its task itself once the job has ended (``StepJobTrigger``'s half
of ``operators/trigger_end``): no second task process, no resumed try to race the executor.

On success the trigger does what ``execute_complete`` would: it reads and verifies the result
manifest (bounded), logs the result and the billing, pushes the same XComs through Airflow's
XCom backend (the return value, the ``multiple_outputs`` keys, the billing record; the length
a mapped downstream task expands over), keeps the result for the step cache and frees the
job's resources, then ends the task with ``TaskSuccessEvent``. A job that failed or passed the
task's ``execution_timeout`` ends it with ``TaskFailedEvent`` after the remote exception, its
traceback and the service's reason are logged (the trigger's lines are the task log's);
Airflow's retries apply. A step that raised ``AirflowSkipException`` is skipped.

Whatever the worker must still decide (a capacity failure to fail over from, an earlier try's
job that was stopped, a job that could not be followed, a step that raised
``AirflowFailException``, a result Airflow would refuse to push) and anything that goes wrong
here return None: the trigger then sends its usual event and the task resumes in a worker,
which reads the result again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_stepop.backends.naming import shown_job
from airflow_stepop.triggers.process_identity import this_process
from airflow_stepop.triggers.services import load_backend
from airflow_stepop.triggers.user_kill import FLUSH_SECONDS

if TYPE_CHECKING:
    from airflow.triggers.base import TriggerEvent

    from airflow_stepop.backends.base import StepBackend

# Event statuses the trigger may end the task on; the others are the worker's to handle.
ENDS_TASK = frozenset({"succeeded", "failed", "timeout"})
# A result manifest larger than this is read by a worker, not on the triggerer (shared by every
# trigger): inline results are 64 KiB each by default ([stepop] inline_result_max_bytes).
TRIGGER_RESULT_MAX_BYTES = 4 << 20


class TaskEnd:
    """``StepJobTrigger``'s choice, once its job has ended, to end the task itself."""

    backend_path: str
    backend_kwargs: dict[str, Any]
    deferred_by: str | None
    end_task: dict[str, Any] | None
    log: Any
    storage_conn_id: str | None

    async def _ended_task(self, event: TriggerEvent, cursors: Any) -> TriggerEvent | None:
        """The event that ends the task itself (``task_end.py``), or None: it resumes in a
        worker. Never in the process that deferred (``dag.test()`` resumes the task with any
        event's payload, and a task not deferrable runs its trigger itself). A triggerer
        stopping meanwhile saves the log relay's cursor (``cursors``) first."""
        try:
            return await self._end_task(event)
        except asyncio.CancelledError:  # the next triggerer goes on from here
            with contextlib.suppress(Exception):
                await asyncio.wait_for(cursors.flush(), FLUSH_SECONDS)
            raise

    async def _end_task(self, event: TriggerEvent) -> TriggerEvent | None:
        if self.end_task is None or self.deferred_by == this_process():
            return None
        payload = event.payload
        if (
            not isinstance(payload, dict)
            or payload.get("status") not in ENDS_TASK
            or "phase" in payload
            or payload.get("handle", {}).get("after_image_build")
        ):
            return None  # an image build's end, or a job it created: the worker records it
        try:
            backend = await asyncio.to_thread(load_backend, self.backend_path, self.backend_kwargs)
        except Exception:  # the usual event says what the worker needs to know
            return None
        return await ended_task(self.log, backend, self.end_task, payload, self.storage_conn_id)


async def ended_task(
    log: Any, backend: StepBackend, end: dict[str, Any], event: dict[str, Any], conn_id: str | None
) -> TriggerEvent | None:
    """The event that ends the task for the job's ``event`` (None: let the worker resume)."""
    status = event["status"]
    if status not in ENDS_TASK:
        return None
    if status == "failed" and event.get("capacity") and end.get("capacity_failover"):
        return None  # the worker tries the next machine type
    if status != "succeeded" and not end.get("end_failure"):
        return None  # a failure callback, email, retry_policy...: the worker fails the task
    try:
        if status == "succeeded":
            outcome = await asyncio.to_thread(_succeeded, log, backend, end, event, conn_id)
            if outcome is None:
                return None
            await asyncio.to_thread(_deliver, end, outcome, event["handle"], conn_id)
            from airflow.triggers.base import TaskSuccessEvent

            ended: TriggerEvent = TaskSuccessEvent()
        else:
            ended = await asyncio.to_thread(_failed, log, event, conn_id, bool(end.get("end_skip")))
            if ended is None:
                return None
    except Exception as exc:
        log.warning(
            "The task resumes in a worker to finish job %s: its end here failed (%s: %s)",
            shown_job(event["handle"]), type(exc).__name__, exc,
        )  # fmt: skip
        return None
    await asyncio.to_thread(_release, log, backend, event["handle"])
    return ended


def _succeeded(
    log: Any, backend: StepBackend, end: dict[str, Any], event: dict[str, Any], conn_id: str | None
) -> dict[str, tuple[Any, int | None]] | None:
    """The XComs to push (key -> value and mapped length) for a job that succeeded, after its
    result was read and verified; None where Airflow would refuse the result (the worker then
    fails the task with Airflow's own error)."""
    from airflow_stepop.artifacts.storage import worker_storage
    from airflow_stepop.backends.outcome import job_billing, read_result, shown

    handle = event["handle"]
    storage = worker_storage(conn_id)
    result, manifest = read_result(handle, storage, conn_id, max_bytes=TRIGGER_RESULT_MAX_BYTES)
    result_xcoms = _result_xcoms(end, result)
    if result_xcoms is None:
        return None
    log.info("Step job %s succeeded; result: %s", shown_job(handle), shown(result))
    billing = job_billing(log, backend, event)
    # the order of the worker's pushes: the billing record (execute_complete), then the
    # task runner's: a multiple_outputs key of the same name wins, the return value last
    xcoms = {backend.billing_xcom_key: (billing, None)} if billing is not None else {}
    xcoms.update(result_xcoms)
    kept = end.get("cache")
    if isinstance(kept, dict) and kept.get("try_number") == end["try_number"]:
        from airflow_stepop.backends.cache_entry import write_entry

        made_by = {name: end[name] for name in ("run_id", "task_id", "map_index", "try_number")}
        write_entry(kept, end["dag_id"], made_by, handle, storage, manifest, billing, log)
    return xcoms


def _result_xcoms(end: dict[str, Any], result: Any) -> dict[str, tuple[Any, int | None]] | None:
    """The XComs Airflow's task runner pushes for ``result`` (``_push_xcom_if_needed``)."""
    if not end.get("do_xcom_push") or result is None:
        return None if end.get("mapped_over") else {}  # Airflow fails a task mapped over so
    mapped_length = None
    if end.get("mapped_over"):
        if not isinstance(result, (list, dict)):
            return None
        mapped_length = len(result)
    xcoms: dict[str, tuple[Any, int | None]] = {}
    if end.get("multiple_outputs"):
        if not isinstance(result, Mapping) or not all(isinstance(k, str) for k in result):
            return None
        xcoms.update((key, (value, None)) for key, value in result.items())
    xcoms["return_value"] = (result, mapped_length)
    return xcoms


def _deliver(
    end: dict[str, Any],
    xcoms: dict[str, tuple[Any, int | None]],
    handle: dict[str, Any],
    conn_id: str | None,
) -> None:
    """Push the XComs through the XCom backend Airflow is configured with, as the task runner
    does (in this thread: a backend's serialization, an object store's upload say, stays off
    the triggerer's loop; the Task SDK sends each to the triggerer's supervisor), then note
    the delivery."""
    from airflow.sdk.execution_time.xcom import XCom

    for key, (value, mapped_length) in xcoms.items():
        XCom.set(
            key,
            value,
            dag_id=end["dag_id"],
            task_id=end["task_id"],
            run_id=end["run_id"],
            map_index=end["map_index"],
            dag_result=end.get("dag_result", False) and key == "return_value",
            _mapped_length=mapped_length,
        )
    _note_delivery(handle, conn_id)


def _note_delivery(handle: dict[str, Any], conn_id: str | None) -> None:
    """The marker that says this job's result was delivered (``earlier_try``): written once
    the XComs are, before the task ends; a failure here lets the worker deliver it instead."""
    import json
    import time

    from airflow_stepop.artifacts.storage import worker_storage
    from airflow_stepop.backends.outcome import delivery_marker

    note = {"job_id": handle["job_id"], "delivered_at": time.time()}
    worker_storage(conn_id).write_bytes(delivery_marker(handle), json.dumps(note).encode())


def _failed(
    log: Any, event: dict[str, Any], conn_id: str | None, end_skip: bool
) -> TriggerEvent | None:
    """The failure, logged as the task's error, and the event that ends the task so."""
    from airflow.sdk import exceptions
    from airflow.triggers.base import TaskFailedEvent, TaskSkippedEvent

    from airflow_stepop.artifacts.storage import worker_storage
    from airflow_stepop.backends.outcome import step_failure

    error = step_failure(event, worker_storage(conn_id))
    if isinstance(error, exceptions.AirflowSkipException):
        if not end_skip:
            return None  # on_skipped_callback: the worker skips the task
        log.info("Skipping the task: %s", error)
        return TaskSkippedEvent()
    if isinstance(error, exceptions.AirflowFailException):
        return None  # fails without a retry: only the worker can say so
    log.error("Task failed with %s: %s", type(error).__name__, error)
    return TaskFailedEvent()


def _release(log: Any, backend: StepBackend, handle: dict[str, Any]) -> None:
    try:
        backend.release(handle)
    except Exception as exc:
        log.warning("Could not release job %s: %s", shown_job(handle), exc)
