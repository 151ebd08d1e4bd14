"""What execute() hands to Airflow when a step defers: the StepJobTrigger's path and arguments.

Airflow's Task Runner does nothing with a ``TaskDeferred``'s trigger but call ``serialize()``
(and read ``supports_triggerer_queue``); the triggerer, and ``dag.test()``, build the trigger
anew from what that returns. Building a ``StepJobTrigger`` in the worker would import Airflow's
``airflow.triggers.base`` and its pydantic models, about 10 ms of CPU in every task process,
for an object that is only serialized. This stands in for it there; ``run()`` builds the real
trigger where one runs in the worker (non-deferrable mode, tests).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.triggers.base import TriggerEvent

    from airflow_stepop.backends.base import JobService
    from airflow_stepop.triggers.step_job import StepJobTrigger

TRIGGER_PATH = "airflow_stepop.triggers.step_job.StepJobTrigger"


class StepJobDeferral:
    """A StepJobTrigger as Airflow stores it: ``StepJobTrigger(**kwargs)`` is the trigger."""

    supports_triggerer_queue = True  # as BaseTrigger: the task's queue picks the triggerer

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self._running: StepJobTrigger | None = None  # the trigger run() runs here, if any

    @property
    def handle(self) -> dict[str, Any]:
        return self.kwargs["handle"]

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return TRIGGER_PATH, dict(self.kwargs)

    def trigger(self) -> StepJobTrigger:
        from airflow_stepop.triggers.step_job import StepJobTrigger

        return StepJobTrigger(**self.kwargs)

    def run(self) -> AsyncIterator[TriggerEvent]:
        self._running = self.trigger()
        return self._running.run()

    def following(self) -> tuple[JobService, dict[str, Any]]:
        """What the trigger run here follows now (the image's build, then the job) and its
        handle: what a timeout in this process stops."""
        from airflow_stepop.triggers.services import load_backend

        trigger = self._running or self.trigger()
        return load_backend(*trigger._following), trigger.handle

    def __repr__(self) -> str:
        return f"StepJobTrigger(job_id={self.handle.get('job_id')!r})"
