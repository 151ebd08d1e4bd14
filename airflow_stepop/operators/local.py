"""LocalStepOperator: the embedded default backend (a local process or container)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_stepop import config
from airflow_stepop.operators.base import BaseStepOperator

if TYPE_CHECKING:  # imported in make_backend(): a DAG file's parse does not need it
    from airflow_stepop.backends.local import LocalBackend


class LocalStepOperator(BaseStepOperator):
    """Run the callable as a detached local process, or in a container when ``docker=`` is set."""

    def make_backend(self) -> LocalBackend:
        from airflow_stepop.backends.local import LocalBackend

        jobs_dir = config.get("local_jobs_dir") or f"{config.airflow_home()}/stepop-jobs"
        return LocalBackend(jobs_dir=jobs_dir)
