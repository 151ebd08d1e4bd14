"""One poller per poll group in a triggerer process: many deferred steps, few status calls.

Each trigger asks ``await poller.status(handle, due)`` for its job's state at or after ``due``.
The poller runs one *round* when the earliest waiting trigger is due (never sooner than the
backend's ``first_poll_seconds`` after the previous round) and answers every waiting trigger
from one ``astatuses`` call, so triggers fall into step and a service sees about one batch of
List calls per poll interval however many jobs it runs. Jobs the batch leaves out get one
``astatus`` each. The poller's backend instance is shared by its triggers (``backend``), so
per-job knowledge a backend keeps (phases, final reads) is in one place.

A poller belongs to one event loop. Triggers ``attach`` while they run and ``detach`` when they
end: the first to attach prepares the shared backend (``prepare_async``, once per poller, so a
backend built only to find its poll group opens no client), the last trigger watching a job
lets the backend ``forget`` it, and the last to detach closes the backend's clients and retires
the poller. Several triggers may watch one job (a cleared try's and the retry that re-attached).

The loop is shared by every deferred task, so the poller's waits are finite whatever it is
given (``waits.py``): a ``due`` that is NaN or infinite is clamped to now .. an hour ahead, the
gap between rounds is at least ``ROUND_GAP_RANGE[0]``, and only triggers still waiting for an
answer keep it running, so it always waits on the loop between two rounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from airflow_stepop.backends.base import JobStatus, StepBackend
from airflow_stepop.triggers.waits import (
    DEFAULT_ROUND_GAP,
    POLL_INTERVAL_RANGE,
    ROUND_GAP_RANGE,
    bounded,
)

log = logging.getLogger(__name__)


@dataclass
class _Waiter:
    handle: dict[str, Any]
    due: float
    answer: asyncio.Future[JobStatus] = field(repr=False)


class JobPoller:
    def __init__(self, backend: StepBackend, key: tuple[Any, ...]) -> None:
        self.backend = backend
        self.key = key
        self.rounds = 0  # how many batched polls ran (what the tests of batching read)
        self._waiting: dict[int, _Waiter] = {}  # by id(): triggers of one job wait side by side
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_round = 0.0
        self._prepared: asyncio.Task[None] | None = None
        self._watched: Counter[str] = Counter()  # job id -> triggers watching it
        self.users = 0
        self.gap, note = bounded(
            "first_poll_seconds", backend.first_poll_seconds, ROUND_GAP_RANGE, DEFAULT_ROUND_GAP
        )
        if note:
            log.warning("%s of %s; rounds are spaced by that", note, key[1])

    async def attach(self, handle: dict[str, Any]) -> None:
        """Join the poller to watch ``handle``'s job, once its backend is ready for async calls.

        The backend's first imports (a cloud SDK: seconds) and reads (a connection) run in a
        thread, so the triggerer's loop serves the other triggers meanwhile."""
        self.users += 1
        self._watched[handle["job_id"]] += 1
        if self._prepared is None:
            self._prepared = asyncio.ensure_future(asyncio.to_thread(self.backend.prepare_async))
        try:
            await asyncio.shield(self._prepared)
        except BaseException:
            if self._prepared.done() and self._prepared.exception() is not None:
                self._prepared = None  # the next trigger tries again (a connection fixed since)
            await self.detach(handle)
            raise

    async def detach(self, handle: dict[str, Any]) -> None:
        job_id = handle["job_id"]
        self._watched[job_id] -= 1
        if self._watched[job_id] <= 0:
            del self._watched[job_id]
            self.backend.forget(handle)
        self.users -= 1
        if self.users > 0:
            return
        if _pollers.get(self.key) is self:
            del _pollers[self.key]
        try:
            await self.backend.aclose()
        except Exception as exc:
            log.warning("Closing the clients of %s failed: %s", self.key[1], exc)

    async def status(self, handle: dict[str, Any], due: float) -> JobStatus:
        """The job's state from the first round at or after ``due`` (a ``time.monotonic()``;
        one that is not finite means now, and none is more than the longest poll interval
        ahead)."""
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        if not isinstance(due, (int, float)) or math.isnan(due) or due == -math.inf:
            log.warning("Job %s asked for a poll at %r: polling it now", handle["job_id"], due)
            due = now
        due = min(due, now + POLL_INTERVAL_RANGE[1])
        waiter = _Waiter(handle, due, loop.create_future())
        self._waiting[id(waiter)] = waiter
        self._wake.set()
        if self._task is None:
            self._task = loop.create_task(self._run())
        try:
            return await waiter.answer
        finally:
            del self._waiting[id(waiter)]

    async def _run(self) -> None:
        try:
            while True:
                self._wake.clear()
                # Answered triggers leave ``_waiting`` only once their task runs again: they
                # neither keep the poller running nor make a round due (a loop that went on
                # for them would spin without ever letting their task run).
                pending = [w for w in self._waiting.values() if not w.answer.done()]
                if not pending:
                    return
                earliest = min(w.due for w in pending)
                start = max(earliest, self._last_round + self.gap)
                delay = start - time.monotonic()
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), delay)
                    continue  # someone new may be due sooner: look again
                await self._round(pending)
        finally:
            self._task = None

    async def _round(self, waiters: list[_Waiter]) -> None:
        self._last_round = time.monotonic()
        self.rounds += 1
        jobs = {w.handle["job_id"]: w.handle for w in waiters}  # each job asked about once
        try:
            answers: dict[str, JobStatus | BaseException] = dict(
                await self.backend.astatuses(list(jobs.values()))
            )
        except Exception as exc:  # every trigger backs off on its own (jittered)
            for waiter in waiters:
                _settle(waiter, exc)
            return
        missing = [job_id for job_id in jobs if job_id not in answers]
        singles = await asyncio.gather(
            *(self.backend.astatus(jobs[job_id]) for job_id in missing), return_exceptions=True
        )
        answers.update(zip(missing, singles, strict=True))
        for waiter in waiters:
            _settle(waiter, answers[waiter.handle["job_id"]])


def _settle(waiter: _Waiter, answer: JobStatus | BaseException) -> None:
    if waiter.answer.done():
        return
    if isinstance(answer, BaseException):
        waiter.answer.set_exception(answer)
    else:
        waiter.answer.set_result(answer)


_pollers: dict[tuple[Any, ...], JobPoller] = {}


def poller_for(backend_path: str, backend: StepBackend, group: str | None = None) -> JobPoller:
    """The running loop's poller of ``backend``'s poll group (made with this backend if new);
    ``group`` is ``backend.poll_group()`` when the caller has it already."""
    key = (id(asyncio.get_running_loop()), backend_path, group or backend.poll_group())
    poller = _pollers.get(key)
    if poller is None:
        poller = _pollers[key] = JobPoller(backend, key)
    return poller
