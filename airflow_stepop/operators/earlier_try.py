"""What an earlier try of a task instance left: a job still running, a result, or nothing.

Each try records the job it submitted in Airflow's task state store, which survives retries and
clears, so a retry re-attaches to a live job or returns the verified result of a finished one
instead of paying for the step again. Imported by ``execute()``, never at DAG parse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from airflow_stepop.backends.naming import shown_job

if TYPE_CHECKING:
    from airflow.sdk.types import Logger

    from airflow_stepop.backends.base import StepBackend

STATE_KEY = "stepop_job"


class EarlierJobUnknownError(RuntimeError):
    """The service did not say what became of an earlier try's job (no answer, access denied)."""

    def __init__(self, message: str, handle: dict[str, Any]) -> None:
        super().__init__(message)
        self.handle = handle


class Reused(NamedTuple):  # named tuples: each frozen dataclass costs a parse ~1 ms
    result: Any
    handle: dict[str, Any]  # the earlier try's job, which made it


class EarlierJob(NamedTuple):
    """A retry's choice: re-attach to ``attach``, return ``reuse``, or (neither) submit anew."""

    attach: dict[str, Any] | None = None
    reuse: Reused | None = None


def earlier_job(
    backend: StepBackend,
    store: Any,
    try_number: int,
    key: str,
    storage_conn_id: str | None,
    log: Logger,
) -> EarlierJob:
    """What to do about an earlier try's job.

    The task state store holds the handle each try submitted, so a retry costs one status
    call. Without a record (a worker lost between submit and record) a retry asks the
    service with ``find_active``; a first try asks nothing.
    """
    record = recall(store)
    if record is None:
        handle = backend.find_active(key) if try_number > 1 else None
        return EarlierJob(attach=handle)
    handle = record["handle"]
    try:
        status = backend.status(handle)
    except Exception as exc:
        if not backend.is_gone(exc):  # it may still run: a second job would be paid twice
            raise EarlierJobUnknownError(
                f"Cannot look up job {shown_job(handle)} of an earlier try "
                f"({type(exc).__name__}: {exc}); this try fails rather than start a second "
                "job beside one that may still run. A later try asks again.",
                handle,
            ) from exc
        # deleted or expired: nothing to re-attach to or reuse; a retry failing on it for ever
        # would never run the step again
        log.warning(
            "The earlier job %s is gone (%s); running the step again", shown_job(handle), exc
        )
        return EarlierJob()
    if status.stopping:  # its try was cleared or killed: its result will never come
        log.info("The earlier job %s is being stopped; running the step again", shown_job(handle))
        return EarlierJob()
    if not status.terminal:
        return EarlierJob(attach=handle)
    if status.held:  # failed, but the service still holds it: nobody will come back for it
        backend.stop(handle)
    delivered = bool(record.get("delivered"))
    if status.state == "succeeded" and not delivered:  # or its trigger delivered it
        delivered = _delivered_by_trigger(handle, storage_conn_id)
    if status.state == "succeeded" and not delivered:
        reused = _reuse(handle, record.get("try_number"), storage_conn_id, log)
        if reused is not None:
            return EarlierJob(reuse=reused)
    log.info(
        "The earlier job %s %s%s; running the step again",
        shown_job(handle),
        status.state,
        " and its result was delivered" if delivered else "",
    )
    return EarlierJob()


def _delivered_by_trigger(handle: dict[str, Any], storage_conn_id: str | None) -> bool:
    """Whether the trigger that ended the earlier try delivered this job's result (its
    marker, ``triggers/task_end``): then a clear runs the step again, as after a worker
    delivered it. Whoever may write the run directory can make a retry run the step again
    (a marker written) or reuse the verified result of the cleared try (the marker deleted),
    never hand it another result. A marker that cannot be read counts as absent."""
    from airflow_stepop.artifacts.storage import worker_storage
    from airflow_stepop.backends.outcome import delivery_marker

    try:
        return worker_storage(storage_conn_id).exists(delivery_marker(handle))
    except Exception:
        return False


def _reuse(
    handle: dict[str, Any], try_number: Any, storage_conn_id: str | None, log: Logger
) -> Reused | None:
    """The verified result of an earlier try's finished job, or None if it is not whole."""
    from airflow_stepop.artifacts.storage import worker_storage
    from airflow_stepop.backends.outcome import read_result  # a first try never reads one

    storage = worker_storage(storage_conn_id)
    try:
        result = read_result(handle, storage, storage_conn_id, check_artifacts=True).value
    except Exception as exc:
        log.warning("Job %s succeeded but its result cannot be used (%s)", shown_job(handle), exc)
        return None
    log.info(
        "Job %s of try %s already succeeded and left a verified result: returning it "
        "without starting a new job",
        shown_job(handle),
        try_number,
    )
    return Reused(result, handle)


def recall(store: Any) -> dict[str, Any] | None:
    """The job record an earlier try (or this one) kept, if any."""
    if store is None:
        return None
    record = store.get(STATE_KEY)
    return record if isinstance(record, dict) and isinstance(record.get("handle"), dict) else None


def remember(store: Any, record: dict[str, Any]) -> None:
    """Keep the job's handle across tries: the task state store survives retries and clears
    (``delivered`` tells a cleared task's record from a lost result's)."""
    if store is not None:
        store.set(STATE_KEY, record)
