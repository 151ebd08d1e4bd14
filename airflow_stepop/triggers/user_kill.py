"""A user's kill of a deferred step (mark failed or success, clear): ``StepJobTrigger``'s half.

Airflow awaits the trigger's ``on_kill``: it stops what the trigger follows now (the image's
build, or the job; a job whose create was on its way when the kill came is waited for and
stopped), then relays what the job prints while it stops (a ``finally:`` saving its work), from
where the relay stopped, until it has ended or shortly before ``[triggerer] on_kill_timeout``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from typing import Any

from airflow_stepop.backends.base import JobService
from airflow_stepop.backends.naming import shown_job
from airflow_stepop.triggers.relay_cursor import CursorStore
from airflow_stepop.triggers.waits import ON_KILL_TIMEOUT_RANGE, bounded

LOG_TAIL_LINES = 40
# How long a job being stopped is followed for its last lines (a cloud's stop is a SIGTERM, a
# grace period, then the upload; SageMaker's grace is 120 s, most steps need less).
STOP_WAIT_SECONDS = 60.0
# How long a cancelled trigger may take to save its log cursor (a triggerer's shutdown waits).
FLUSH_SECONDS = 2.0
# The relay of the stopping job's lines ends this long before Airflow's on_kill_timeout.
KILL_MARGIN_SECONDS = 5.0


class UserKill:
    """``on_kill`` of a trigger that follows ``handle`` with the service ``_following`` names."""

    handle: dict[str, Any]
    backend_path: str
    backend_kwargs: dict[str, Any]
    log: Any
    _job_ended: bool
    _cursors: CursorStore | None
    _following: tuple[str, dict[str, Any]]

    async def on_kill(self) -> None:
        if self._job_ended:  # killed while its event waits: a finished job has nothing to stop
            self.log.info("Task killed by a user; job %s had ended", shown_job(self.handle))
            return
        began = time.monotonic()
        # a create on its way (the build had just ended) is waited for, to stop what it made
        created = await self.created_meanwhile(_kill_limit() - KILL_MARGIN_SECONDS)
        if created is not None:
            self.handle, self._cursors = created, None
            self._following = (self.backend_path, self.backend_kwargs)
        if self.handle.get("joined"):  # other tasks' build: it goes on for them
            self.log.info(
                "Task killed by a user while it waited for image build %s, which other tasks "
                "wait for too: it goes on", shown_job(self.handle),
            )  # fmt: skip
            return
        what = "job" if self._following[0] == self.backend_path else "image build"
        self.log.info("Task killed by a user: stopping %s %s", what, shown_job(self.handle))
        service = await asyncio.to_thread(self._prepared_backend)
        try:
            await service.astop(self.handle)
            await self._relay_after_kill(service, began)
        finally:
            await service.aclose()

    async def _relay_after_kill(self, backend: JobService, began: float) -> None:
        """Relay what the step prints while it stops (a ``finally:`` saving its work), as at
        the deadline, from where this trigger's relay stopped; until the job has ended, or
        shortly before Airflow would cancel ``on_kill`` (``[triggerer] on_kill_timeout``)."""
        cursors = self._cursors
        if cursors is None:  # killed before it followed the job: no cursor to go on from
            return
        give_up = began + min(STOP_WAIT_SECONDS, _kill_limit() - KILL_MARGIN_SECONDS)
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


def _kill_limit() -> float:
    """Airflow's ``[triggerer] on_kill_timeout``: when it cancels ``on_kill``."""
    from airflow.sdk import conf

    limit, _ = bounded(
        "[triggerer] on_kill_timeout",
        conf.getfloat("triggerer", "on_kill_timeout", fallback=30.0),
        ON_KILL_TIMEOUT_RANGE,
        30.0,
    )
    return limit
