"""StepJobTrigger: waits for a step's job in the triggerer, relaying its log into the task log.

Generic over backends: it rebuilds the backend from its import path and keyword arguments and
only calls the async half of the StepBackend contract. It holds a deadline (what was left of
the task's ``execution_timeout`` when it deferred, counted on the triggerer's clock from the
deferral's first trigger: ``deadline.py``), never an attempt counter; on the deadline it stops
the job (within a poll round of it: no wait between polls runs past it). Every wait it computes
is finite and within a stated range (``waits.py``): a stored number that is NaN, infinite,
negative or huge is clamped, with a warning in the task log. On a user kill (mark
failed/success, clear) Airflow awaits ``on_kill``, which stops the job; a triggerer restart does
not stop it. ``run()`` has no side effect that cannot be repeated, so a second copy under
triggerer HA is harmless.

Many steps, few calls: the job's state comes from the poll group's shared poller
(``poller.py``), the backend's log calls take tokens of a per-process budget (``[stepop]
log_calls_per_second``, see ``StepBackend.alogs``), and the
log cursor is saved beside the run (``relay-<job>.json``) so that a trigger resumed by another
triggerer continues the relay where it stopped instead of from the start.

When the job has ended, the trigger ends the task itself where it may (``task_end.py``). Where
the task resumes in a worker instead, a job that ended within seconds of its deferral holds its
event a while (``_hold_seconds``): the resumed task must not be queued before Airflow's executor
has reported the deferring try's exit.

A step whose image a service builds defers before its job exists: the trigger then follows the
build first, the same way, and creates the job when the build succeeds (``image_phase.py``); one
deadline covers both. A user's kill stops whichever it follows (``user_kill.py``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator, Collection
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_stepop.backends.base import JobService, JobStatus, StepBackend
from airflow_stepop.backends.naming import shown_job
from airflow_stepop.triggers.deadline import deadline_at
from airflow_stepop.triggers.image_phase import ImagePhase
from airflow_stepop.triggers.job_log_relay import JobLogRelay, first_wait
from airflow_stepop.triggers.poller import JobPoller, poller_for
from airflow_stepop.triggers.process_identity import this_process
from airflow_stepop.triggers.progress import Progress
from airflow_stepop.triggers.relay_cursor import CursorStore
from airflow_stepop.triggers.services import load_backend, prepared_service, service_and_group
from airflow_stepop.triggers.task_end import TaskEnd
from airflow_stepop.triggers.user_kill import (
    FLUSH_SECONDS,
    LOG_TAIL_LINES,
    STOP_WAIT_SECONDS,
    UserKill,
)
from airflow_stepop.triggers.waits import (
    DEFAULT_POLL_INTERVAL,
    POLL_INTERVAL_RANGE,
    RESUME_HOLD_RANGE,
    TIME_LEFT_RANGE,
    bounded,
    finite_or_none,
)

# A triggerer's supervisor reads a trigger's log lines and its event from two sockets; the event
# closes the task's trigger log file, so lines still unread then land in the triggerer's own log
# (Airflow 3.3, seen with many jobs ending in one poll round). The event waits this long after
# the last lines, for the supervisor to read them first.
LAST_LINES_GRACE_SECONDS = 0.5


def _passed(end: float | None) -> bool:
    """Whether a deadline on ``time.monotonic()``'s clock (None: none) has passed."""
    return end is not None and time.monotonic() >= end


class StepJobTrigger(TaskEnd, UserKill, ImagePhase, JobLogRelay, BaseTrigger):
    def __init__(
        self,
        backend_path: str,
        backend_kwargs: dict[str, Any],
        handle: dict[str, Any],
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        deadline: float | None = None,
        storage_conn_id: str | None = None,
        resume_hold: float = 0.0,
        deferred_by: str | None = None,
        time_left: float | None = None,
        image_build: dict[str, Any] | None = None,
        prepared: dict[str, Any] | None = None,
        end_task: dict[str, Any] | None = None,
    ) -> None:
        """``time_left``: seconds of execution_timeout left when the task deferred (None: no
        timeout). ``deadline`` is what the previous version passed instead (the worker's wall
        clock): a trigger it stored still loads and keeps that deadline. ``image_build`` (an
        ``ImageBuild``'s JSON) and ``prepared`` (a ``PreparedJob``'s body): the job is not
        created yet; the trigger follows the build (``handle`` is the build's), then creates
        the job and follows it. ``end_task`` (``operators/trigger_end``): the trigger ends the
        task itself when the job has ended (``task_end.py``); None: the task resumes."""
        super().__init__()
        self.backend_path = backend_path
        self.backend_kwargs = backend_kwargs
        self.handle = handle
        self.image_build = image_build
        self.prepared = prepared
        self.end_task = end_task if isinstance(end_task, dict) else None
        # Stored numbers are clamped (``waits.py``); what was changed is said in the task log
        # when the trigger runs (Airflow routes a trigger's lines there only from then on).
        self._clamped: list[str] = []
        self.poll_interval = self._seconds(
            "poll_interval", poll_interval, POLL_INTERVAL_RANGE, DEFAULT_POLL_INTERVAL
        )
        self.resume_hold = self._seconds("resume_hold", resume_hold, RESUME_HOLD_RANGE, 0.0)
        self.time_left = None if time_left is None else self._seconds(
            "time_left", time_left, TIME_LEFT_RANGE, TIME_LEFT_RANGE[0]
        )  # fmt: skip
        self.deadline = finite_or_none(deadline)
        if deadline is not None and self.deadline is None:
            self._clamped.append(f"deadline={deadline!r} is not a time: no deadline")
        self.storage_conn_id = storage_conn_id
        self.deferred_by = deferred_by
        self._log_outage = False
        self._job_ended = False
        # The relay's cursor once this trigger has followed the job: on_kill goes on from it.
        self._cursors: CursorStore | None = None
        # What this trigger follows now (a kill stops it): the build first, if any, then the job.
        self._following = (
            (image_build["builder_path"], image_build["builder_kwargs"])
            if image_build is not None
            else (backend_path, backend_kwargs)
        )

    def _seconds(self, name: str, value: Any, limits: tuple[float, float], default: float) -> float:
        seconds, note = bounded(name, value, limits, default)
        if note:
            self._clamped.append(note)
        return seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        kwargs = {
            "backend_path": self.backend_path,
            "backend_kwargs": self.backend_kwargs,
            "handle": self.handle,
            "poll_interval": self.poll_interval,
            "storage_conn_id": self.storage_conn_id,
            "resume_hold": self.resume_hold,
            "deferred_by": self.deferred_by,
            "time_left": self.time_left,
        }
        if self.deadline is not None:  # a trigger the previous version stored
            kwargs["deadline"] = self.deadline
        if self.image_build is not None:
            kwargs.update(image_build=self.image_build, prepared=self.prepared)
        if self.end_task is not None:
            kwargs["end_task"] = self.end_task
        return f"{type(self).__module__}.{type(self).__qualname__}", kwargs

    @property
    def backend(self) -> StepBackend:
        return load_backend(self.backend_path, self.backend_kwargs)

    def _prepared_backend(self) -> JobService:
        """What this trigger follows now (its job's backend, or its image's builder), ready for
        its async calls (call it in a thread: it imports and reads)."""
        return prepared_service(*self._following)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # The backend's import and its poll group (it may read a connection) run in a thread:
        # the triggerer's loop serves the other triggers meanwhile. Only a new poll group's
        # backend is then prepared for async calls (see JobPoller.attach).
        for note in self._clamped:
            self.log.warning("Trigger of job %s: %s", shown_job(self.handle), note)
        resume_from = time.monotonic() + self._hold_seconds()
        event: TriggerEvent | None = None
        if self.image_build is not None:  # the image first, then the job (``image_phase``)
            event = await self._image_phase()
        if event is None:
            self._following = (self.backend_path, self.backend_kwargs)
            event, cursors = await self._follow_phase(*self._following)
            # From here a user's kill stops only a job that may still run (one it could not
            # follow): not one that ended while the poller is detached, say.
            self._job_ended = event.payload["status"] != "unwatched"
        else:
            cursors = self._cursors or CursorStore(self.handle, self.storage_conn_id)
        ended = await self._ended_task(event, cursors)
        if ended is not None:  # no resumed try: nothing to hold it for
            event, resume_from = ended, time.monotonic()
        await self._before_event(resume_from, cursors)
        # A triggerer killed before the event is stored resumes this trigger: it repeats only
        # the lines of the last seconds, not the whole job's since the last save.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(cursors.save_settled(), FLUSH_SECONDS)
        # Clients are closed before the event goes out: a trigger's code after its yield may
        # never run (``dag.test()`` abandons the generator with its event loop).
        yield event

    async def _follow_phase(
        self, path: str, kwargs: dict[str, Any]
    ) -> tuple[TriggerEvent, CursorStore]:
        """Follow ``self.handle``'s job (or build) of the service ``path(**kwargs)`` to its end:
        the event that says how, and the cursor store of its log relay."""
        cursors = CursorStore(self.handle, self.storage_conn_id)
        try:
            service, group = await asyncio.to_thread(service_and_group, path, kwargs)
            poller = poller_for(path, service, group)
            await poller.attach(self.handle)
        except Exception as exc:  # a connection deleted since the deferral, say
            return self._unwatched(exc, []), cursors
        try:
            return await self._watch(poller, cursors), cursors
        finally:
            await poller.detach(self.handle)

    async def _before_event(self, resume_from: float, cursors: CursorStore) -> None:
        """Wait for the job's last lines to be read, and until ``resume_from`` (monotonic); a
        triggerer stopping meanwhile saves the log cursor, as during the job."""
        hold = resume_from - time.monotonic()
        if hold > LAST_LINES_GRACE_SECONDS:
            self.log.info(
                "The task resumes in %.1f s ([stepop] resume_hold_seconds: Airflow's executor must "
                "first report the deferral's end)", hold,
            )  # fmt: skip
        try:
            await asyncio.sleep(max(LAST_LINES_GRACE_SECONDS, hold))
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(cursors.flush(), FLUSH_SECONDS)
            raise

    def _hold_seconds(self) -> float:
        """How long after this trigger's start its event may go out at the soonest.

        Airflow 3.3 fails a task whose resumed try is queued before the executor has reported
        that the deferring try's process exited (the scheduler reads that report as the new
        try's end: apache/airflow#67287). That report can come seconds after the deferral (the
        task supervisor notices its process's exit up to ``[workers] min_heartbeat_interval``
        late), and a quick job ends sooner; so the event of a job that ended within
        ``[stepop] resume_hold_seconds`` of the trigger's start waits until then. No wait where
        the trigger runs in the process that deferred (``dag.test()`` and ``airflow dags test``
        without ``--use-executor``: no executor).
        """
        return 0.0 if self.deferred_by == this_process() else self.resume_hold

    async def _watch(self, poller: JobPoller, cursors: CursorStore) -> TriggerEvent:
        """Follow the job to its end (or the task's deadline): the event that says how."""
        cursor = await cursors.load()
        self._cursors = cursors
        tail = collections.deque(cursors.tail, maxlen=LOG_TAIL_LINES)
        try:
            return await self._follow(poller, cursors, cursor, tail)
        except asyncio.CancelledError:  # a triggerer stopping: the next one goes on from here
            with contextlib.suppress(Exception):
                await asyncio.wait_for(cursors.flush(), FLUSH_SECONDS)
            raise

    async def _follow(
        self,
        poller: JobPoller,
        cursors: CursorStore,
        cursor: Any,
        tail: collections.deque[str],
    ) -> TriggerEvent:
        """Poll and relay until the job ends or the task's deadline passes."""
        backend = poller.backend  # shared by the group's triggers
        job_id = shown_job(self.handle)
        progress = Progress(self.handle, self.log, running_since=cursors.running_since)
        wait = min(first_wait(backend), self.poll_interval)  # a user's 1 s polls from the first
        first = self._first_poll_in(wait)
        failures = 0
        # The deadline on the clock of the poller's rounds: a round due at ``end`` runs at or
        # after it. Only a round's own time says whether the deadline passed: a round of another
        # trigger of the poll group answers this one too, sooner than it asked.
        end = await self._end()
        self.log.info("Waiting for %s %s", (self.handle.get("kind") or "job").lower(), job_id)
        while True:
            # No wait runs past the deadline: the poller answers with its first round at or
            # after ``due`` (rounds are at least first_poll_seconds apart), so the job is stopped
            # within a round of its deadline, not up to a poll interval after it.
            now = time.monotonic()
            step = first if first is not None else wait
            first = None
            due = now + step if end is None else max(now, min(now + step, end))
            try:
                status = await poller.status(self.handle, due)
                if status.terminal and not status.details:
                    status = await backend.astatus(self.handle)  # final facts: one describe
                failures = 0
            except Exception as exc:
                if not backend.is_transient(exc):
                    return self._unwatched(exc, tail)
                if _passed(end):  # the service does not answer, but the deadline holds
                    return await self._time_out(backend, tail, None, None)
                failures += 1
                limit = None if end is None else end - time.monotonic()
                await self._back_off(f"Polling {job_id}", exc, failures, limit=limit)
                continue
            cursor = await self._relay_round(backend, cursor, cursors, tail, final=status.terminal)
            progress.update(status)
            cursors.running_since = progress.running_since
            if status.terminal:
                if status.held:
                    self.log.warning("Job %s %s; cancelling it", job_id, status.reason)
                    await backend.astop(self.handle)
                return self._event(status, tail)
            if _passed(end):
                return await self._time_out(backend, tail, cursor, cursors)
            # Short jobs finish fast, long ones are polled at poll_interval.
            wait = min(self.poll_interval, wait * 2)

    def _first_poll_in(self, wait: float) -> float:
        """Seconds to the first poll: ``wait`` after the job's submit (the worker's clock), not
        after this trigger's start, which comes a triggerer's pick-up later."""
        submitted = finite_or_none(self.handle.get("submitted_at"))
        if submitted is None:
            return wait
        return min(wait, max(0.0, submitted + wait - time.time()))

    async def _end(self) -> float | None:
        """The task's deadline on ``time.monotonic()``'s clock, None for none: one for the
        image's build and the job, kept where the first phase's trigger started it."""
        if not hasattr(self, "_end_at"):
            self._end_at = await self._first_end()
        return self._end_at

    async def _first_end(self) -> float | None:
        if self.time_left is not None:
            now = time.time()
            at = await deadline_at(
                self.handle, self.storage_conn_id, self.deferred_by, self.time_left, now
            )
            return time.monotonic() + at - now
        if self.deadline is not None:  # stored by the previous version: the worker's clock
            return time.monotonic() + self.deadline - time.time()
        return None

    async def _time_out(
        self,
        backend: StepBackend,
        tail: collections.deque[str],
        cursor: Any,
        cursors: CursorStore | None,
    ) -> TriggerEvent:
        """Stop the job at the task's deadline; with ``cursors`` (the service answers), relay
        what the step printed while it stopped (a ``finally:`` saving its work, say)."""
        job_id = shown_job(self.handle)
        if self.handle.get("joined"):  # other tasks' build: it goes on for them
            self.log.error("The task's execution_timeout passed while it waited for image build "
                           "%s, which other tasks wait for too: it goes on", job_id)  # fmt: skip
            return self._timeout_event(tail)
        self.log.error("Job %s passed the task's execution_timeout; stopping it", job_id)
        await backend.astop(self.handle)
        if cursors is not None:
            give_up = time.monotonic() + STOP_WAIT_SECONDS
            await self._relay_until_ended(backend, tail, cursor, cursors, give_up)
        return self._timeout_event(tail)

    def _timeout_event(self, tail: Collection[str]) -> TriggerEvent:
        return TriggerEvent(
            {
                "status": "timeout",
                "reason": "execution_timeout reached",
                "handle": self.handle,
                "log_tail": list(tail),
            }
        )

    def _unwatched(self, exc: Exception, tail: Collection[str]) -> TriggerEvent:
        """The event for a job this trigger cannot follow (an error no retry of the call
        mends: credentials revoked, a connection deleted). Raising instead would fail the task
        with no ``on_kill``, its job running on unwatched; the event lets ``execute_complete``
        stop the job, or leave it to a retry that re-attaches."""
        self.log.error(
            "Cannot follow job %s: %s: %s", shown_job(self.handle), type(exc).__name__, exc,
            exc_info=exc,
        )  # fmt: skip
        return TriggerEvent(
            {
                "status": "unwatched",
                "reason": f"its state could not be read ({type(exc).__name__}: {exc})",
                "handle": self.handle,
                "log_tail": list(tail),
            }
        )

    def _event(self, status: JobStatus, tail: collections.deque[str]) -> TriggerEvent:
        return TriggerEvent(
            {
                "status": status.state,
                "reason": status.reason,
                "capacity": status.capacity,
                "details": status.details,
                "handle": self.handle,
                "log_tail": list(tail),
            }
        )
