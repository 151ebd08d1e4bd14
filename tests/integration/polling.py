"""One round of the real poller over submitted jobs: the list-polling tests of each cloud."""

from __future__ import annotations

import asyncio
from typing import Any

from airflow_stepop.backends.base import JobStatus, StepBackend


def one_round(
    backend: StepBackend, handles: list[dict[str, Any]]
) -> list[JobStatus | BaseException]:
    """Every handle's status (or error) from one round of the poller the triggers share."""
    from airflow_stepop.triggers.poller import JobPoller

    async def poll() -> list[JobStatus | BaseException]:
        await asyncio.to_thread(backend.prepare_async)
        poller = JobPoller(backend, ("test", type(backend).__name__))
        try:
            answers = await asyncio.gather(
                *(poller.status(h, 0.0) for h in handles), return_exceptions=True
            )
        finally:
            await backend.aclose()  # its clients belong to this loop
        assert poller.rounds == 1
        return answers

    return asyncio.run(poll())


def cancel(backend: StepBackend, handles: list[dict[str, Any]]) -> None:
    for handle in handles:
        backend.stop(handle)
