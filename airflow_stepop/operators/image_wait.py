"""A step whose image a service builds: the operator's half (``BaseStepOperator`` inherits it),
and how a step waits in its own process when it does not defer.

The worker starts or joins the build (``StepBackend.prepare``), records that this try has no
job yet, and defers with a trigger that follows the build and then creates the job
(``triggers/image_phase``). A trigger that ends before any job exists comes back here
(``_no_job``): the build failed, the create was refused, or another try's job holds the job's
name (then the job is submitted from here under another name).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_stepop.backends.base import JobService, PreparedJob, StepBackend
    from airflow_stepop.triggers.deferral import StepJobDeferral


class ImageWait:
    """``_wait_for_image`` and ``_no_job`` of ``BaseStepOperator``."""

    deferrable: bool
    log: Any
    _killed: bool
    _handle: tuple[JobService, dict[str, Any]] | None

    def _wait_for_image(self, context: Any, backend: StepBackend, prepared: PreparedJob) -> Any:
        """Defer while a service builds the job's image: the trigger follows the build, then
        creates the job (``triggers/image_phase``). Not deferrable: the same, in this process."""
        from airflow_stepop.operators.earlier_try import remember

        build = prepared.image_build
        assert build is not None
        ti = context["ti"]
        builder = build.builder()
        self._handle = (builder, build.handle)  # on_kill stops the build
        # no job yet: a retry finds one the trigger created with find_active
        record = {"handle": None, "image_build": build.handle, "try_number": ti.try_number}
        remember(context.get("task_state_store"), record)
        trigger = self._trigger(backend, build.handle, build.to_json(), prepared.body)
        if self._killed:
            self._stop_killed(builder, build.handle)
        if self.deferrable:
            if not still_running(ti):
                self._killed = True
                self._stop_killed(builder, build.handle)
            self.defer(trigger=trigger, method_name="execute_complete")
        return self.execute_complete(context, self._run_inline(trigger))

    def _no_job(self, context: Any, backend: StepBackend, event: dict[str, Any]) -> Any:
        """The trigger ended before any job existed: the image's build failed, or the create
        after it (the job's name held by another try's job: submitted again from here, under
        another name). A build that could not be followed is left running: a retry joins it."""
        from airflow_stepop.backends.outcome import before_job_failure
        from airflow_stepop.operators.task_identity import task_identity

        if event["status"] == "name_taken":
            self.log.warning("%s", event.get("reason"))
            return self._start(context, task_identity(context), backend, fresh=False)
        if event["status"] == "no_capacity":  # the create after the build: the next type
            return self._fail_over(context, backend, event.get("reason"))  # type: ignore[attr-defined]
        build = event["handle"]
        if event["status"] == "stopped" and build.get("joined") and not self._killed:
            self.log.warning(
                "Image build %s, which this task waited for, was stopped by the task that "
                "started it: this task builds the image itself", build.get("job_id"),
            )  # fmt: skip
            return self._start(context, task_identity(context), backend)
        raise before_job_failure(event)


def still_running(ti: Any) -> bool:
    """Is this task instance still running, as the API server has it? A user's mark or clear
    reaches a task process as SIGTERM only at its next heartbeat (every 5 s by default), and
    the server refuses the deferral of a task no longer running: that process then exits with
    no ``on_kill``, and a job it submitted would run on with nobody watching. One question
    before the deferral closes that window to the few milliseconds after it."""
    try:
        states = ti.get_task_states(
            dag_id=ti.dag_id, map_index=ti.map_index, task_ids=[ti.task_id], run_ids=[ti.run_id]
        )
    except Exception:  # no answer: the deferral goes ahead, as it would without the question
        return True
    key = ti.task_id if ti.map_index < 0 else f"{ti.task_id}_{ti.map_index}"
    state = (states.get(ti.run_id) or {}).get(key, "running")
    return state == "running"


async def first_event(trigger: StepJobDeferral) -> dict[str, Any]:
    async for event in trigger.run():
        return event.payload
    raise RuntimeError("the trigger ended without an event")
