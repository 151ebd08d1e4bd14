"""A step job's console links in the task: logged, stored for the UI, recalled after a deferral.

Links are best effort: an API server that does not answer never fails a step (a failure after
the submit would otherwise leave the job to a retry, or stop it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_stepop.backends.naming import shown_job

if TYPE_CHECKING:
    from logging import Logger

    from airflow_stepop.backends.base import StepBackend


def store_links(
    log: Logger, context: Any, backend: StepBackend, handle: dict[str, Any]
) -> frozenset[str] | None:
    """Log the job's links and store them for the UI: the kinds stored (None: perhaps some).

    The task log shows them too (as the UI's link buttons name them): a log read without the
    UI (``airflow dags test``, a shipped log) still leads to the job."""
    try:
        links = backend.links(handle)
        for kind, url in links.items():
            log.info("Step %s: %s", kind, url)
        if not links:  # a backend without a console has none: nothing to import
            return frozenset()
        from airflow_stepop.links.job import persist_links

        return persist_links(context, links)
    except Exception as exc:
        log.warning("Could not store the links of job %s: %s", shown_job(handle), exc)
        return None  # the end-of-task lookup asks for all


def recall_links(backend: StepBackend, handle: dict[str, Any]) -> frozenset[str] | None:
    """In a task resumed after its deferral: the kinds of link execute() stored for this job."""
    try:
        return frozenset(kind for kind, url in backend.links(handle).items() if url)
    except Exception:
        return None
