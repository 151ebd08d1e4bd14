"""How a step waits for its submitted job (``BaseStepOperator`` inherits it): the job is
recorded for a retry and linked, then followed by its trigger, deferred or run in this process
(not deferrable), with what is left of ``execution_timeout``. A failure past the submit leaves
the job to a retry, which re-attaches to it, or stops it when no retry is left; a killed task
stops it.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import TaskDeferred

from airflow_stepop import config
from airflow_stepop.backends.naming import shown_job
from airflow_stepop.operators.image_wait import first_event, still_running

if TYPE_CHECKING:
    from airflow_stepop.backends.base import JobService, StepBackend
    from airflow_stepop.triggers.deferral import StepJobDeferral


class JobWait:
    """``_follow`` of ``BaseStepOperator``, with the trigger it defers to or runs inline."""

    deferrable: bool
    execution_timeout: timedelta | None
    log: Any
    poll_interval: float | None
    retries: int | None
    stored_link_kinds: frozenset[str] | None
    storage_conn_id: str | None
    _killed: bool
    _cache_kept: dict[str, Any] | None
    _handle: tuple[JobService, dict[str, Any]] | None
    _inline: StepJobDeferral | None

    def _stop_killed(self, service: JobService, handle: dict[str, Any]) -> None:
        from airflow_stepop.backends.outcome import StepKilledError

        self.log.warning("The task was killed: stopping %s", shown_job(handle))
        service.stop(handle)
        raise StepKilledError(f"The task was killed: {shown_job(handle)} was stopped")

    def _follow(self, context: Any, backend: StepBackend, handle: dict[str, Any]) -> Any:
        """Record the job for a retry, link it, and wait for it: deferred, or here."""
        from airflow_stepop.operators.earlier_try import remember
        from airflow_stepop.operators.job_links import store_links

        ti = context["ti"]
        self._handle = (backend, handle)
        try:
            remember(
                context.get("task_state_store"), {"handle": handle, "try_number": ti.try_number}
            )
            end = self._trigger_end(context, backend) if self.deferrable else None
            self.stored_link_kinds = store_links(self.log, context, backend, handle)
            trigger = self._trigger(backend, handle, end_task=end)
            if self._killed:  # on_kill stopped the job: there is nothing to wait for
                from airflow_stepop.backends.outcome import StepKilledError

                raise StepKilledError(f"The task was killed: job {shown_job(handle)} was stopped")
            if self.deferrable:
                if not still_running(ti):
                    self._killed = True
                    self._stop_killed(backend, handle)
                self.defer(trigger=trigger, method_name="execute_complete")
        except TaskDeferred:
            raise
        except BaseException:
            if not self._killed:  # a killed task's job is stopped already
                self._left_to_retry(backend, handle, ti)
            raise
        return self.execute_complete(context, self._run_inline(trigger))

    def _trigger_end(self, context: Any, backend: StepBackend) -> dict[str, Any] | None:
        """What the trigger needs to end the task itself (``operators/trigger_end``); None,
        the task resumes in a worker, also when finding out fails: the job is submitted."""
        from airflow_stepop.operators.trigger_end import trigger_end

        try:
            return trigger_end(self, context, backend, self._cache_kept)
        except Exception as exc:
            self.log.warning("The task resumes in a worker after its job (%s: %s)",
                             type(exc).__name__, exc)  # fmt: skip
            return None

    def _run_inline(self, trigger: StepJobDeferral) -> dict[str, Any]:
        """Run the trigger in this process (not deferrable): its event's payload. Meanwhile
        on_kill stops what it follows (the image's build, then the job it created)."""
        self._inline = trigger
        try:
            return asyncio.run(first_event(trigger))
        except BaseException as exc:  # execution_timeout, SIGTERM...: the job must not outlive us
            service, handle = trigger.following()
            if not handle.get("joined"):  # a build other tasks wait for goes on for them
                service.stop(handle)
            if type(exc).__name__ == "AirflowTaskTimeout":  # Airflow's says only "Timeout, PID"
                from airflow_stepop.backends.base import StepBackend

                what = "job" if isinstance(service, StepBackend) else "image build"
                raise type(exc)(
                    f"Step {what} {shown_job(handle)} timeout: execution_timeout reached; the "
                    f"{what} was stopped"
                ) from exc
            raise

    def _trigger(
        self,
        backend: StepBackend,
        handle: dict[str, Any],
        image_build: dict[str, Any] | None = None,
        prepared: dict[str, Any] | None = None,
        end_task: dict[str, Any] | None = None,
    ) -> StepJobDeferral:
        """The job's trigger as Airflow stores it (building it would cost the worker ~10 ms);
        with ``image_build``, the trigger of a job not yet created (``handle`` is the build's);
        with ``end_task``, one that ends the task itself (``operators/trigger_end``)."""
        from airflow_stepop.triggers.deferral import StepJobDeferral
        from airflow_stepop.triggers.process_identity import this_process

        kwargs: dict[str, Any] = {}
        if image_build is not None:
            kwargs = {"image_build": image_build, "prepared": prepared}
        if end_task is not None:
            kwargs["end_task"] = end_task
        return StepJobDeferral(
            backend_path=f"{type(backend).__module__}.{type(backend).__qualname__}",
            backend_kwargs=backend.serialize(),
            handle=handle,
            poll_interval=self.poll_interval or config.get_float("poll_interval"),
            time_left=self._time_left(),
            storage_conn_id=self.storage_conn_id,
            resume_hold=config.get_int("resume_hold_seconds"),
            deferred_by=this_process(),
            **kwargs,
        )

    def _left_to_retry(self, backend: StepBackend, handle: dict[str, Any], ti: Any) -> bool:
        """After a failure past the submit: whether a retry is left to re-attach to the job;
        with none left, the job is stopped."""
        max_tries = getattr(ti, "max_tries", None)
        if max_tries is None:
            max_tries = self.retries or 0
        if self.retries and ti.try_number <= max_tries:
            self.log.warning("Leaving job %s to the retry, which re-attaches", shown_job(handle))
            return True
        self.log.warning("No retry is left: stopping job %s", shown_job(handle))
        try:
            backend.stop(handle)
        except Exception as exc:
            self.log.error("Could not stop job %s: %s", shown_job(handle), exc)
        return False

    def _time_left(self) -> float | None:
        """What is left of execution_timeout, counted like Airflow's: from execute(). A duration
        on this worker's clock alone: the triggerer's clock may differ (``triggers/deadline``)."""
        if not isinstance(self.execution_timeout, timedelta):
            return None
        now = time.time()
        started = getattr(self, "_started", None) or now
        return max(0.0, started + self.execution_timeout.total_seconds() - now)
