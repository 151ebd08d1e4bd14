"""How a step's trigger relays its job's log into the task log (``StepJobTrigger``'s half).

Each poll relays a round of bounded reads (``log_drain.relay_round``): every read's lines reach
the task log, cleaned of control characters and cut into marked pieces
(``backends.log_lines.relayed_lines``), and its cursor the cursor store, before the next read. A
failing log service never holds back the job's state; a job being stopped is followed for what
its ``finally:`` prints.
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
from typing import Any

from airflow_stepop.backends.base import StepBackend
from airflow_stepop.backends.log_lines import relayed_lines
from airflow_stepop.backends.naming import shown_job
from airflow_stepop.backends.outcome import tail_line
from airflow_stepop.triggers.log_drain import relay_round
from airflow_stepop.triggers.relay_cursor import CursorStore
from airflow_stepop.triggers.waits import (
    DEFAULT_ROUND_GAP,
    MAX_BACKOFF_EXPONENT,
    ROUND_GAP_RANGE,
    bounded,
)

MAX_BACKOFF_SECONDS = 60.0
# Lines written to the task log between two yields to the event loop: a read of short lines
# (a progress bar of \r frames) is tens of thousands of records, each a log call.
SHOW_BATCH = 500
FINAL_LOG_ATTEMPTS = 3  # reads of a finished job's last lines before its event goes out anyway


def first_wait(backend: StepBackend) -> float:
    """The backend's first_poll_seconds, finite and within ``ROUND_GAP_RANGE``."""
    return bounded("first_poll_seconds", backend.first_poll_seconds, ROUND_GAP_RANGE,
                   DEFAULT_ROUND_GAP)[0]  # fmt: skip


class JobLogRelay:
    """The log relay of a trigger that watches ``handle``: what ``StepJobTrigger`` inherits."""

    handle: dict[str, Any]
    poll_interval: float
    log: Any
    _log_outage: bool

    async def _relay_until_ended(
        self,
        backend: StepBackend,
        tail: collections.deque[str],
        cursor: Any,
        cursors: CursorStore,
        give_up: float,
    ) -> None:
        """Relay the lines of a job being stopped until the service says it ended, or a last
        read at ``give_up`` (monotonic): on a cloud a stop is a SIGTERM, a grace period and an
        upload, so what a ``finally:`` prints comes after the stop call returns. The cursor is
        saved as in the job's life: a triggerer restarting meanwhile resumes without repeating
        them."""
        wait = first_wait(backend)
        while True:
            try:
                ended = (await backend.astatus(self.handle)).terminal
            except Exception as exc:  # throttled: ask again next round; else relay what is there
                ended = not backend.is_transient(exc)
            left = give_up - time.monotonic()
            final = ended or left <= 0
            cursor = await self._relay_round(backend, cursor, cursors, tail, final=final)
            if final:
                return
            await asyncio.sleep(min(wait, left))  # the last read falls at give_up, not past it
            wait = min(wait * 2, 5.0)

    async def _relay_round(
        self,
        backend: StepBackend,
        cursor: Any,
        cursors: CursorStore,
        tail: collections.deque[str],
        *,
        final: bool,
    ) -> Any:
        """Relay the job's new lines, reading again at once while more waits (``log_drain``):
        each read's lines reach the task log, and its cursor the store, before the next read."""

        async def show(lines: list[str], after: Any) -> None:
            for start in range(0, len(lines), SHOW_BATCH):  # the event loop is everyone's
                self._show(lines[start : start + SHOW_BATCH], tail)
                await asyncio.sleep(0)
            await cursors.save(after, relayed=len(lines), tail=tail)

        def read(at: Any) -> Any:
            return self._relay(backend, at, final=final)

        return await relay_round(read, show, cursor, final=final)

    def _show(self, lines: list[str], tail: collections.deque[str]) -> None:
        """The job's lines into the task log, and into the tail its event carries."""
        for line in lines:
            for piece in relayed_lines(line):
                self.log.info("[%s] %s", shown_job(self.handle), piece)
        tail.extend(map(tail_line, lines))

    async def _relay(
        self, backend: StepBackend, cursor: Any, *, final: bool
    ) -> tuple[list[str], Any]:
        """New log lines and the next cursor. A failing log service never holds back the job's
        state: while the job runs, its lines wait for a later round (the cursor stays; one
        warning per outage); for a finished job the read is tried a few times, then the event
        goes out without them."""
        what = f"Reading the log of {shown_job(self.handle)}"
        attempts = FINAL_LOG_ATTEMPTS if final else 1
        for attempt in range(1, attempts + 1):
            try:
                lines, cursor = await backend.alogs(self.handle, cursor)
            except Exception as exc:
                if attempt < attempts and backend.is_transient(exc):
                    await self._back_off(what, exc, attempt)
                    continue
                if final:
                    self.log.warning("%s failed (%s); its last lines stay in the service's log",
                                     what, exc)  # fmt: skip
                elif not self._log_outage:
                    self.log.warning("%s failed (%s); trying again each round", what, exc)
                self._log_outage = True
                return [], cursor
            if self._log_outage:
                self.log.info("%s works again; relaying from where it stopped", what)
                self._log_outage = False
            return lines, cursor
        return [], cursor

    async def _back_off(
        self, what: str, exc: BaseException, failures: int, limit: float | None = None
    ) -> None:
        """Pause before a retry (jittered, growing with ``failures``), at most ``limit`` s."""
        exponent = min(failures, MAX_BACKOFF_EXPONENT)
        delay = min(self.poll_interval * 2**exponent, MAX_BACKOFF_SECONDS)
        delay *= random.uniform(0.5, 1.0)  # jitter: many triggers must not retry in step
        if limit is not None:
            delay = max(0.0, min(delay, limit))
        self.log.warning("%s failed (%s); retrying in %.0fs", what, exc, delay)
        await asyncio.sleep(delay)
