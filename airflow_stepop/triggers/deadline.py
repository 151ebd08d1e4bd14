"""The task's deadline on the triggerers' clock, whatever the worker's clock says.

``execution_timeout`` counts from ``execute()``, on the worker; the trigger enforces it in the
triggerer, on another machine. A wall-clock instant passed from one to the other carries the
worker's clock error with it: a worker an hour behind would have the job stopped at its first
poll, one an hour ahead would let it run an hour too long. So the worker passes a *duration*,
``time_left`` (what is left of execution_timeout when it defers, measured on its own clock
alone), and the trigger's first start turns it into an instant on the triggerer's clock.

A trigger resumed by another triggerer (a restart, an HA failover) must not start the count
again: the first start keeps the instant beside the job's run (``deadline-<job>.json``, keyed
by the deferral, so a retry that re-attaches to the job gets its own), and a resumed trigger
reads it back. Triggerers share Airflow's clock assumptions (they and the scheduler compare
the database's timestamps), workers often run elsewhere (Celery or edge workers).

A job can write its run directory, so the stored instant is never taken past
``now + time_left``: a rewritten file cannot buy a job more time than a lost one would.
Saving is best effort: a storage error means the count starts at this trigger's start.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from airflow_stepop.runtime.storage import join
from airflow_stepop.triggers.relay_cursor import in_io_thread
from airflow_stepop.triggers.waits import finite_or_none

log = logging.getLogger(__name__)
MAX_DOCUMENT_BYTES = 4096  # ours is under 200 bytes


async def deadline_at(
    handle: dict[str, Any],
    conn_id: str | None,
    deferral: str | None,
    time_left: float,
    now: float,
) -> float:
    """The deadline (wall clock, this triggerer's) of the deferral ``deferral`` of ``handle``'s
    job, which had ``time_left`` seconds left when it deferred; ``now`` is ``time.time()``."""
    latest = now + time_left
    if not deferral:  # nothing to tell two deferrals of one job apart: count from now
        return latest
    uri = join(handle["run_uri"], f"deadline-{handle['job_id']}.json")

    def read_or_write() -> float:
        from airflow_stepop.artifacts.storage import worker_storage

        storage = worker_storage(conn_id)
        try:
            document = json.loads(storage.read_bounded(uri, MAX_DOCUMENT_BYTES))
        except FileNotFoundError:
            document = None
        except ValueError:  # not a document of ours (too large, not JSON, not a plain file)
            document = None
        if isinstance(document, dict) and document.get("deferred_by") == deferral:
            stored = finite_or_none(document.get("deadline"))
            if stored is not None:
                return min(stored, latest)
        # this deferral's first trigger (or a file it cannot use): the count starts now
        written = {"job_id": handle["job_id"], "deferred_by": deferral, "deadline": latest}
        storage.write_bytes(uri, json.dumps(written).encode())
        return latest

    try:
        return await in_io_thread(read_or_write)
    except Exception as exc:
        log.warning("Could not keep the deadline of job %s in %s (%s)", handle["job_id"], uri, exc)
        return latest
