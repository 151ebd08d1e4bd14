"""What a step's task does once its trigger has ended: ``execute_complete`` (``BaseStepOperator``
inherits it). It reads the job's verified result and billing, keeps the result for the step
cache, records delivery for a retry, and turns a job that did not succeed into the task's
error; or it runs the step again when the earlier try's job it re-attached to was stopped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_stepop.backends.naming import shown_job

if TYPE_CHECKING:
    from airflow_stepop.backends.base import StepBackend


class StepCompletion:
    """``execute_complete`` of ``BaseStepOperator``, with what it calls."""

    log: Any
    stored_link_kinds: frozenset[str] | None
    storage_conn_id: str | None
    _killed: bool

    def _fail_over(self, context: Any, backend: StepBackend, reason: Any) -> Any:
        raise NotImplementedError  # ``operators/capacity``

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        from airflow_stepop.artifacts.storage import worker_storage
        from airflow_stepop.backends.outcome import (
            read_result,
            report_billing,
            shown,
            step_failure,
        )
        from airflow_stepop.operators.earlier_try import remember
        from airflow_stepop.operators.job_links import recall_links

        self.stored_link_kinds = None  # execute() may have stored some: until recalled, ask
        handle = event["handle"]
        backend = self.make_backend()
        if event.get("phase") is not None:  # the job was not created (``triggers/image_phase``)
            return self._no_job(context, backend, event)
        storage = worker_storage(self.storage_conn_id)
        if handle.get("after_image_build"):  # created by the trigger: no record, no link yet
            from airflow_stepop.operators.job_links import store_links

            ti = context["ti"]
            remember(context.get("task_state_store"),
                     {"handle": handle, "try_number": ti.try_number})  # fmt: skip
            self.stored_link_kinds = store_links(self.log, context, backend, handle)
        else:
            self.stored_link_kinds = recall_links(backend, handle)
        stopped_by_us = self._killed  # on_kill, not deferrable
        if event["status"] == "stopped" and handle.get("earlier_try") and not stopped_by_us:
            return self._run_again(context, backend, handle)
        # A job its trigger could not follow may still run: a retry re-attaches to it, or it
        # is stopped now (and released below).
        if event["status"] == "unwatched" and self._left_to_retry(backend, handle, context["ti"]):
            raise step_failure(event, storage)
        capacity = event["status"] == "failed" and event.get("capacity") and not self._killed
        if capacity and backend.machine_choices():
            self._release(backend, handle)  # it never ran: the next machine type, if any
            return self._fail_over(context, backend, event.get("reason"))
        try:
            if event["status"] != "succeeded":
                raise step_failure(event, storage)
            result, manifest = read_result(handle, storage, self.storage_conn_id)
            self.log.info("Step job %s succeeded; result: %s", shown_job(handle), shown(result))
            billing = report_billing(self.log, context["ti"], backend, event)
            from airflow_stepop.operators.step_cache import keep_result

            keep_result(context.get("task_state_store"), context["ti"], handle, storage,
                        manifest, billing, self.log)  # fmt: skip
            remember(
                context.get("task_state_store"),
                {"handle": handle, "try_number": context["ti"].try_number, "delivered": True},
            )
            return result
        finally:
            self._release(backend, handle)

    def _release(self, backend: StepBackend, handle: dict[str, Any]) -> None:
        """Free the finished job's resources; never hides the step's own result or error."""
        try:
            backend.release(handle)
        except Exception as exc:
            self.log.warning("Could not release job %s: %s", shown_job(handle), exc)

    def _run_again(self, context: Any, backend: StepBackend, handle: dict[str, Any]) -> Any:
        """An earlier try's job that this try re-attached to was stopped: that try was cleared
        or marked by a user, and its trigger stopped the job after the scheduler had started
        this try (a triggerer notices a clear a moment later). Its result will never come, so
        this try runs the step again, as for any earlier job that was stopped."""
        self.log.warning(
            "Job %s of an earlier try was stopped (that try was cleared or killed): running "
            "the step again as a new job",
            shown_job(handle),
        )
        self._release(backend, handle)
        from airflow_stepop.operators.task_identity import task_identity

        return self._start(context, task_identity(context), backend)
