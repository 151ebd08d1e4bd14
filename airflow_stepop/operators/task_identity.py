"""Which task instance a try belongs to, beyond its dag, run, task and map index.

Those four repeat: a DAG run deleted and triggered again with the same run_id (the REST API's
``dag_run_id``, ``airflow dags trigger --run-id``, backfill scripts, the scheduler re-creating a
deleted scheduled run) has task instances of the same names. Their jobs must not meet the old
run's: not its job names (a service would answer "exists" and the old result would come back),
run directories or checkpoints. Airflow's task instance id (``ti.id``) is new for every try,
and the task state store is deleted with its run but survives retries and clears: the first try
keeps its id there as the *instance*, which every later try of this run reads back. Imported by
``execute()``, never at DAG parse.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from airflow_stepop.backends.base import JobRequest, PreparedJob, StepBackend

INSTANCE_KEY = "stepop_instance"
INSTANCE_CHARS = 12  # 48 bits of a hash of a uuid: one task instance meets no other's


class TaskIdentity(NamedTuple):
    key: str  # naming.task_key of the instance: shared by its tries, in every job name
    instance: str  # this task instance's existence in its DAG run ("" when unknowable)
    try_id: str  # Airflow's id of this try (``ti.id``), "" on an Airflow that has none


def task_identity(context: Any) -> TaskIdentity:
    """The identity of the running try; records the instance before anything is submitted,
    so a retry after a worker lost between submit and record finds its job."""
    from airflow_stepop.backends.naming import task_key

    ti = context["ti"]
    try_id = str(getattr(ti, "id", None) or "")
    instance = _instance(context.get("task_state_store"), try_id)
    return TaskIdentity(
        task_key(ti.dag_id, ti.run_id, ti.task_id, ti.map_index, instance), instance, try_id
    )


def _instance(store: Any, try_id: str) -> str:
    """The instance the first try of this run recorded, else this try's own (recorded now).

    Without a task state store (or a try id) there is nothing to tell runs apart by: "" keeps
    the names of dag, run, task and map index alone, and a job of another run that holds one is
    told apart at submit by its try id (``JobNameTakenError``)."""
    if store is None or not try_id:
        return ""
    recorded = store.get(INSTANCE_KEY)
    if isinstance(recorded, str) and recorded:
        return recorded
    own = hashlib.sha256(try_id.encode()).hexdigest()[:INSTANCE_CHARS]
    store.set(INSTANCE_KEY, own)
    return own


def submit_as_own(
    backend: StepBackend,
    request: JobRequest,
    try_number: int,
    log: Any,
    prepared: PreparedJob | None = None,
) -> dict[str, Any]:
    """Create the job ``prepared`` for the request (prepared now when None) under the request's
    name; where another try's job holds it (``create`` raised ``JobNameTakenError``), prepare
    and create it under another name with this try's id in it, saying so in the task log (the
    run directory is this try's already)."""
    from airflow_stepop.backends.base import JobNameTakenError
    from airflow_stepop.backends.naming import job_name

    prepared = prepared or backend.prepare(request)
    try:
        return backend.create(prepared.body)
    except JobNameTakenError as taken:
        salt = "".join(c for c in request.try_id if c.isalnum())[-6:] or "x"
        name = job_name(request.task_key, try_number, salt=salt)
        log.warning("%s: submitting this try's job as %s", taken, name)
        return backend.create(backend.prepare(dataclasses.replace(request, job_name=name)).body)
