"""Whether a deferred step's trigger may end its task itself, and what it needs to.

A trigger that ends its task (Airflow's ``TaskSuccessEvent``/``TaskFailedEvent``) starts no
second task process and queues no resumed try, so Airflow 3.3's resume race
(apache/airflow#67287) and the hold past it (``[stepop] resume_hold_seconds``) do not apply.
Airflow then sets the task's state from the triggerer and runs nothing of the worker's end of a
task (Airflow 3.3.2's ``models/trigger.py``): no ``on_success_callback`` or
``on_skipped_callback``, no email, no listener (OpenLineage), no asset event for ``outlets``, no
``retry_policy``, no ``post_execute``, no ``fail_fast``; a failure's ``on_failure_callback`` or
``on_retry_callback`` runs in the DAG processor, with neither the exception nor the run's
context (``dag_run``, ``logical_date``), and twice if two triggerers end the task at once. A
task that relies on one of them for the way it ends resumes in a worker to end so: a failure
callback or email keeps the worker for a failure, and a success still ends from the trigger.
The rule is decided here, at the deferral, where the task's definition is at hand.
"""

from __future__ import annotations

from typing import Any

END_FROM_TRIGGER_OPTION = "end_from_trigger"


def worker_needed(op: Any, outcome: str = "success") -> str | None:
    """Why the task must resume in a worker to end with ``outcome`` ("success", "failure" or
    "skip"; None: its trigger may end it so). A failure's callbacks and email keep the worker
    for a failure only: a success still ends from the trigger."""
    from airflow.sdk import BaseOperator

    from airflow_stepop import config

    if not config.get_bool(END_FROM_TRIGGER_OPTION):
        return f"[stepop] {END_FROM_TRIGGER_OPTION} is off"
    if _listeners():
        return "Airflow listeners (OpenLineage, say) are called by the worker"
    callbacks = {"success": ("success",), "failure": ("failure", "retry"), "skip": ("skipped",)}
    for kind in callbacks[outcome]:
        if getattr(op, f"has_on_{kind}_callback", False):
            return f"on_{kind}_callback runs in the worker"
    if outcome == "success":
        if op.outlets:
            return "outlets' asset events are registered by the worker"
        if getattr(op, "_post_execute_hook", None) is not None or (
            type(op).post_execute is not BaseOperator.post_execute
        ):
            return "post_execute runs in the worker"
    if outcome == "failure":
        if op.email and (op.email_on_failure or op.email_on_retry):
            return "email is sent by the worker"
        if getattr(op, "has_retry_policy", False):
            return "retry_policy is applied by the worker"
        if op.has_dag() and op.dag.fail_fast:
            return "the DAG's fail_fast is applied by the worker"
    return None


def _listeners() -> bool:
    from airflow.sdk.listener import get_listener_manager

    return get_listener_manager().has_listeners


def trigger_end(
    op: Any, context: Any, backend: Any, cache: dict[str, Any] | None
) -> dict[str, Any] | None:
    """What the trigger needs to end the task (None: the task resumes in a worker): the task
    instance its XComs go to, how Airflow would push the result, whether a capacity failure
    is the worker's to fail over, and the step cache's key to keep the result under."""
    reason = worker_needed(op)
    if reason is not None:
        op.log.debug("The task resumes in a worker after its job: %s", reason)
        return None
    failure, skip = worker_needed(op, "failure"), worker_needed(op, "skip")
    if failure is not None:
        op.log.debug("The task resumes in a worker if its job fails: %s", failure)
    ti = context["ti"]
    map_index = ti.map_index if ti.map_index is not None else -1
    return {
        "dag_id": ti.dag_id,
        "task_id": ti.task_id,
        "run_id": ti.run_id,
        "map_index": map_index,
        "try_number": ti.try_number,
        "do_xcom_push": bool(op.do_xcom_push),
        "multiple_outputs": bool(op.multiple_outputs),
        "dag_result": bool(getattr(op, "returns_dag_result", False)),
        # Airflow records a mapped-over result's length only for an unmapped task
        "mapped_over": map_index < 0 and op._mapped_over(),
        "capacity_failover": bool(backend.machine_choices()),
        "end_failure": failure is None,  # else the worker fails (or retries) the task
        "end_skip": skip is None,
        "cache": cache,
    }
