"""LocalStepOperator: the embedded default backend (a local process or container)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_stepop import config
from airflow_stepop.backends.local.config import (
    check_jobs_dir,
    check_root,
    job_runtime_limit,
    max_runtime_seconds,
)
from airflow_stepop.operators.base import BaseStepOperator

if TYPE_CHECKING:  # imported in make_backend(): a DAG file's parse does not need it
    from airflow_stepop.backends.local.backend import LocalBackend


class LocalStepOperator(BaseStepOperator):
    """Run the callable as a detached local process, or in a container when ``docker=`` is set.

    :param max_runtime: timedelta or seconds after which the job ends itself, even with no
        trigger watching it; default the task's ``execution_timeout`` plus 5 minutes (the
        trigger stops the job at the deadline), else no limit.
    """

    def __init__(self, *, max_runtime: timedelta | int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.refuse_failover(
            "the local backend runs on the worker's own machine, with no machine types to fail "
            "over between. Drop it (it applies to SageMaker, Vertex AI and Azure ML steps)."
        )
        if self.artifact_root is not None:
            check_root(f"{self.argument_owner}.artifact_root", self.artifact_root)
        self.max_runtime_s = max_runtime_seconds(self.argument_owner, max_runtime)

    def step_artifact_root(self) -> str:
        """The root the step stages to, checked before anything is uploaded there."""
        root = super().step_artifact_root()
        if not self.artifact_root:  # from the configuration, read only now
            check_root(f"[{config.SECTION}] artifact_root", root)
        return root

    def make_backend(self) -> LocalBackend:
        from airflow_stepop.backends.local.backend import LocalBackend

        jobs_dir = config.get("local_jobs_dir") or f"{config.airflow_home()}/stepop-jobs"
        return LocalBackend(
            jobs_dir=check_jobs_dir(jobs_dir),
            max_runtime_s=job_runtime_limit(self.max_runtime_s, self.execution_timeout),
        )
