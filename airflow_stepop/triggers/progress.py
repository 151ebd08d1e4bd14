"""Progress a person can follow in the task log while a step is deferred.

One line at each state change and at most once a minute otherwise: the state, the time since
the job was submitted, why a job that has not ended waits where its service says (its status's
``reason``; a new reason is a change too: a pod no node can take, with the scheduler's
message) and, where the backend says so in the handle, the machine and the cost so far (the
handle's ``price_per_hour`` for the whole job, counted from the first poll that saw the job
running, a resumed trigger's from its predecessor's; left out of the last line of a job this
trigger's polls never saw running). A job waiting in its service's queue for capacity
(``JobStatus.queued``) says since when: from submit when the first poll found it queued, else
from the poll that first did. The times it is given come from the worker's clock
(``submitted_at``) and from a file the job can write (``running_since``): one that is not a
finite number is left out, never a crash of the trigger.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from airflow_stepop.backends.base import JobStatus
from airflow_stepop.backends.naming import shown_job
from airflow_stepop.backends.outcome import usd
from airflow_stepop.triggers.waits import finite_or_none

REPEAT_SECONDS = 60.0


# The event carries the job's last lines (Airflow stores it; a failure shows them): each cut here.
def _duration(seconds: float) -> str:
    seconds = int(max(0.0, seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Progress:
    def __init__(
        self, handle: dict[str, Any], log: Any, *, running_since: float | None = None
    ) -> None:
        """``running_since``: when an earlier trigger of this job first saw it running."""
        self.handle = handle
        self.log = log
        self.submitted = finite_or_none(handle.get("submitted_at")) or time.time()
        self.running_since = finite_or_none(running_since)
        self.seen_running = False  # by this trigger's own polls
        self.state: str | None = None
        self.shown = 0.0
        self.queued_since: float | None = None
        self.waiting_reason: str | None = None

    def line(self, status: JobStatus, now: float) -> str:
        what = self.handle.get("kind") or "Job"  # "Image build" for the build of its image
        parts = [f"{what} {shown_job(self.handle)}: {status.state}, "
                 f"{_duration(now - self.submitted)}"]  # fmt: skip
        parts[0] += " since submit"
        if status.queued and self.queued_since is not None:
            since = datetime.fromtimestamp(self.queued_since, UTC)
            parts.append(f"queued for capacity since {since:%Y-%m-%d %H:%M:%S} UTC")
        if status.reason and not status.terminal:  # why it waits, in the service's words
            parts.append(status.reason)
        if machine := self.handle.get("machine"):
            parts.append(f"on {machine}")
        price = self.handle.get("price_per_hour")
        # A job that ended before this trigger's polls saw it running (between two polls, or
        # while no triggerer ran): its cost is unknown here, not zero nor the time since;
        # the billing line the operator logs next has it.
        if price is not None and not (status.terminal and not self.seen_running):
            running = max(0.0, now - self.running_since) if self.running_since else 0.0
            parts.append(f"about {usd(float(price) * running / 3600)} so far")
        return ", ".join(parts)

    def update(self, status: JobStatus, now: float | None = None) -> None:
        now = time.time() if now is None else now
        if status.state == "running":
            self.seen_running = True
            if self.running_since is None:
                self.running_since = now
        changed = status.state != self.state or status.queued != (self.queued_since is not None)
        waiting_reason = None if status.terminal else status.reason
        changed = changed or waiting_reason != self.waiting_reason
        self.waiting_reason = waiting_reason
        if not status.queued:
            self.queued_since = None
        elif self.queued_since is None:  # queued from the start, or since this poll
            self.queued_since = self.submitted if self.state is None else now
        if changed or now - self.shown >= REPEAT_SECONDS:
            self.state = status.state
            self.shown = now
            self.log.info(self.line(status, now))
