"""The contract every backend fulfils, so operators and the trigger stay generic.

Worker-side calls are synchronous (``execute()`` must stay short); triggerer-side calls are
async and must not block the event loop. A job is known by a ``handle``: a small JSON dict the
backend makes at submit time and the trigger carries (it always has ``job_id`` and
``run_uri``, the run directory of the attempt that started the job; ``output_uri`` when the
job's results land elsewhere, e.g. where the service uploads its output directory).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Literal

from airflow_stepop.settings import DockerSettings, ResourceSettings

JobState = Literal["pending", "running", "succeeded", "failed", "stopped"]
TERMINAL: frozenset[str] = frozenset({"succeeded", "failed", "stopped"})


@dataclass(frozen=True)
class JobRequest:
    """Everything a backend needs to start one step's job."""

    job_name: str
    task_key: str  # the same for every try of one task instance: finds a live job to re-attach
    spec_uri: str
    run_uri: str
    code_uri: str
    resources: ResourceSettings | None = None
    docker: DockerSettings | None = None
    environment: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class JobStatus:
    state: JobState
    reason: str | None = None  # the service's own words for a failure (capacity, OOM, ...)
    # Small JSON facts of a finished job that the operator reports (e.g. billable seconds):
    # they ride in the trigger's event, so the worker needs no call of its own to get them.
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


class StepBackend(abc.ABC):
    """A service that runs step jobs."""

    # The trigger's first poll comes this soon, then the wait doubles up to poll_interval:
    # short local jobs finish fast; services that take minutes to start get fewer calls.
    first_poll_seconds: float = 0.25

    @abc.abstractmethod
    def serialize(self) -> dict[str, Any]:
        """Keyword arguments that rebuild this backend in the triggerer."""

    @abc.abstractmethod
    def submit(self, request: JobRequest) -> dict[str, Any]:
        """Start the job; return its handle."""

    @abc.abstractmethod
    def find_active(self, task_key: str) -> dict[str, Any] | None:
        """The handle of a job of this task instance that is still alive, if any."""

    @abc.abstractmethod
    def stop(self, handle: dict[str, Any]) -> None:
        """Stop the job (idempotent)."""

    @abc.abstractmethod
    async def astatus(self, handle: dict[str, Any]) -> JobStatus: ...

    @abc.abstractmethod
    async def alogs(self, handle: dict[str, Any], cursor: Any) -> tuple[list[str], Any]:
        """New log lines since ``cursor`` (None at first) and the cursor to use next."""

    @abc.abstractmethod
    async def astop(self, handle: dict[str, Any]) -> None: ...

    def release(self, handle: dict[str, Any]) -> None:
        """Free what a finished job still holds (e.g. a stopped container); logs were relayed."""
        return None

    def is_transient(self, exc: Exception) -> bool:
        """Whether a failed call is worth retrying after a pause (throttling, 5xx, network)."""
        return isinstance(exc, (ConnectionError, TimeoutError))

    def links(self, handle: dict[str, Any]) -> dict[str, str]:
        """Console links for the job (name -> URL); none for backends without a console."""
        return {}
