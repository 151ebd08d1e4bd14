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

A job that ends within seconds of its deferral holds its event a while (``_hold_seconds``): the
resumed task must not be queued before Airflow's executor has reported the deferring try's exit.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator, Collection
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_stepop.backends.base import JobStatus, StepBackend
from airflow_stepop.backends.naming import shown_job
from airflow_stepop.triggers.deadline import deadline_at
from airflow_stepop.triggers.job_log_relay import JobLogRelay, first_wait
from airflow_stepop.triggers.poller import JobPoller, poller_for
from airflow_stepop.triggers.process_identity import this_process
from airflow_stepop.triggers.progress import Progress
from airflow_stepop.triggers.relay_cursor import CursorStore
from airflow_stepop.triggers.waits import (
    DEFAULT_POLL_INTERVAL,
    ON_KILL_TIMEOUT_RANGE,
    POLL_INTERVAL_RANGE,
    RESUME_HOLD_RANGE,
    TIME_LEFT_RANGE,
    bounded,
    finite_or_none,
)

LOG_TAIL_LINES = 40
# A triggerer's supervisor reads a trigger's log lines and its event from two sockets; the event
# closes the task's trigger log file, so lines still unread then land in the triggerer's own log
# (Airflow 3.3, seen with many jobs ending in one poll round). The event waits this long after
# the last lines, for the supervisor to read them first.
LAST_LINES_GRACE_SECONDS = 0.5
# How long a job stopped at the task's deadline is followed for its last lines (a cloud's stop
# is a SIGTERM, a grace period, then the upload; SageMaker's grace is 120 s, most steps need less).
STOP_WAIT_SECONDS = 60.0
# How long a cancelled trigger may take to save its log cursor (a triggerer's shutdown waits).
FLUSH_SECONDS = 2.0
# After a user's kill, the relay of the stopping job's lines ends this long before Airflow's
# ``[triggerer] on_kill_timeout`` would cancel ``on_kill``.
KILL_MARGIN_SECONDS = 5.0


def _passed(end: float | None) -> bool:
    """Whether a deadline on ``time.monotonic()``'s clock (None: none) has passed."""
    return end is not None and time.monotonic() >= end


def load_backend(path: str, kwargs: dict[str, Any]) -> StepBackend:
    from airflow.sdk.module_loading import import_string

    return import_string(path)(**kwargs)


class StepJobTrigger(JobLogRelay, BaseTrigger):
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
    ) -> None:
        """``time_left``: seconds of execution_timeout left when the task deferred (None: no
        timeout). ``deadline`` is what the previous version passed instead (the worker's wall
        clock): a trigger it stored still loads and keeps that deadline."""
        super().__init__()
        self.backend_path = backend_path
        self.backend_kwargs = backend_kwargs
        self.handle = handle
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
        return f"{type(self).__module__}.{type(self).__qualname__}", kwargs

    @property
    def backend(self) -> StepBackend:
        return load_backend(self.backend_path, self.backend_kwargs)

    def _prepared_backend(self) -> StepBackend:
        """The backend, ready for its async calls (call it in a thread: it imports and reads)."""
        backend = self.backend
        backend.prepare_async()
        return backend

    def _backend_and_group(self) -> tuple[StepBackend, str]:
        backend = self.backend
        return backend, backend.poll_group()

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # The backend's import and its poll group (it may read a connection) run in a thread:
        # the triggerer's loop serves the other triggers meanwhile. Only a new poll group's
        # backend is then prepared for async calls (see JobPoller.attach).
        for note in self._clamped:
            self.log.warning("Trigger of job %s: %s", shown_job(self.handle), note)
        resume_from = time.monotonic() + self._hold_seconds()
        cursors = CursorStore(self.handle, self.storage_conn_id)
        try:
            backend, group = await asyncio.to_thread(self._backend_and_group)
            poller = poller_for(self.backend_path, backend, group)
            await poller.attach(self.handle)
        except Exception as exc:  # a connection deleted since the deferral, say
            event = self._unwatched(exc, [])
        else:
            try:
                event = await self._watch(poller, cursors)
                # From here a user's kill stops only a job that may still run (one it could not
                # follow): not one that ended while the poller is detached, say.
                self._job_ended = event.payload["status"] != "unwatched"
            finally:
                await poller.detach(self.handle)
        await self._before_event(resume_from, cursors)
        # A triggerer killed before the event is stored resumes this trigger: it repeats only
        # the lines of the last seconds, not the whole job's since the last save.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(cursors.save_settled(), FLUSH_SECONDS)
        # Clients are closed before the event goes out: a trigger's code after its yield may
        # never run (``dag.test()`` abandons the generator with its event loop).
        yield event

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
        wait = first_wait(backend)
        failures = 0
        # The deadline on the clock of the poller's rounds: a round due at ``end`` runs at or
        # after it. Only a round's own time says whether the deadline passed: a round of another
        # trigger of the poll group answers this one too, sooner than it asked.
        end = await self._end()
        self.log.info("Waiting for job %s", job_id)
        while True:
            # No wait runs past the deadline: the poller answers with its first round at or
            # after ``due`` (rounds are at least first_poll_seconds apart), so the job is stopped
            # within a round of its deadline, not up to a poll interval after it.
            now = time.monotonic()
            due = now + wait if end is None else max(now, min(now + wait, end))
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

    async def _end(self) -> float | None:
        """The task's deadline on ``time.monotonic()``'s clock, None for none."""
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
        self.log.error("Job %s passed the task's execution_timeout; stopping it", job_id)
        await backend.astop(self.handle)
        if cursors is not None:
            give_up = time.monotonic() + STOP_WAIT_SECONDS
            await self._relay_until_ended(backend, tail, cursor, cursors, give_up)
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
                "details": status.details,
                "handle": self.handle,
                "log_tail": list(tail),
            }
        )

    async def on_kill(self) -> None:
        if self._job_ended:  # killed while its event waits: a finished job has nothing to stop
            self.log.info("Task killed by a user; job %s had ended", shown_job(self.handle))
            return
        self.log.info("Task killed by a user: stopping job %s", shown_job(self.handle))
        began = time.monotonic()
        backend = await asyncio.to_thread(self._prepared_backend)
        try:
            await backend.astop(self.handle)
            await self._relay_after_kill(backend, began)
        finally:
            await backend.aclose()

    async def _relay_after_kill(self, backend: StepBackend, began: float) -> None:
        """Relay what the step prints while it stops (a ``finally:`` saving its work), as at
        the deadline, from where this trigger's relay stopped; until the job has ended, or
        shortly before Airflow would cancel ``on_kill`` (``[triggerer] on_kill_timeout``)."""
        cursors = self._cursors
        if cursors is None:  # killed before it followed the job: no cursor to go on from
            return
        from airflow.sdk import conf

        limit, _ = bounded(
            "[triggerer] on_kill_timeout",
            conf.getfloat("triggerer", "on_kill_timeout", fallback=30.0),
            ON_KILL_TIMEOUT_RANGE,
            30.0,
        )
        give_up = began + min(STOP_WAIT_SECONDS, limit - KILL_MARGIN_SECONDS)
        cursor, tail = cursors.latest
        tail = collections.deque(tail, maxlen=LOG_TAIL_LINES)
        # a last read that hangs is cut before Airflow's own cut, so the cursor is still saved
        backstop = give_up + KILL_MARGIN_SECONDS / 2 - time.monotonic()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                self._relay_until_ended(backend, tail, cursor, cursors, give_up), backstop
            )
        # what it relayed is not relayed again by a later trigger of the job (a re-attached try)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(cursors.flush(), FLUSH_SECONDS)
