"""The local backend's argument rules, checked when a DAG declares a step (no heavy imports).

The local backend's jobs read the code bundle, the inputs and the spec from the worker's own
disk (a process, or a container with the artifact root mounted at the same path), so its
artifact root must be a local directory: a ``file://`` URL or an absolute path.

No local "service" limits how long a job runs, so the backend gives each job its own
``max_runtime`` (by default the task's ``execution_timeout`` plus the same grace as the clouds'),
which the step's runtime enforces on itself.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import unquote, urlsplit

from airflow_stepop.backends import arguments as check
from airflow_stepop.setting_values import SettingsError

EXAMPLE = "file:///data/stepop"
# SIGALRM's range is an unsigned int of seconds; a year is past any step's deadline.
MAX_RUNTIME_LIMIT = int(timedelta(days=365).total_seconds())


def max_runtime_seconds(owner: str, value: Any) -> int | None:
    """``max_runtime`` as whole seconds (None: derive it from ``execution_timeout``)."""
    if value is None:
        return None
    return check.seconds(
        owner, "max_runtime", value, low=1, high=MAX_RUNTIME_LIMIT, service="the local backend"
    )


def job_runtime_limit(max_runtime_s: int | None, execution_timeout: Any) -> int | None:
    """The limit a job is started with: ``max_runtime`` as given, else ``execution_timeout``
    plus the grace (the trigger stops the job at the deadline; this only ends an unwatched
    one), else none."""
    return max_runtime_s or check.runtime_limit(
        execution_timeout, high=MAX_RUNTIME_LIMIT, otherwise=None
    )


def check_jobs_dir(value: str) -> str:
    """The job records' directory (``[stepop] local_jobs_dir``), which the worker and the
    triggerer must both find: a relative one would be each process's own."""
    if not value.startswith("/"):
        raise SettingsError(
            f"[stepop] local_jobs_dir={value!r} (AIRFLOW__STEPOP__LOCAL_JOBS_DIR) is not an "
            "absolute path; the worker and the triggerer must find the same job records (and "
            "'~' is not expanded). Give one such as '/data/stepop-jobs', or leave it empty for "
            "$AIRFLOW_HOME/stepop-jobs."
        )
    return value


def check_root(field: str, value: str) -> None:
    """Refuse an artifact root the local backend's jobs cannot read; ``field`` names where it
    was set (``LocalStepOperator.artifact_root`` or ``[stepop] artifact_root``)."""
    parts = urlsplit(value)
    if parts.scheme in ("file", "local"):
        path = unquote(parts.path)
        # file://data/x is not data/x: the host part is dropped, the files go to /x
        local = parts.netloc in ("", "localhost") and path.startswith("/")
    else:
        local = parts.scheme == "" and value.startswith("/")
    if local:
        return
    problem = (
        "is not a local directory"
        if parts.scheme not in ("", "file", "local")
        else "is not an absolute local path"
    )
    raise SettingsError(
        f"{field}={value!r} {problem}: the local backend's jobs read code, inputs and results "
        f"from the worker's disk. Use a file:// URL or an absolute path such as {EXAMPLE!r}. "
        "To keep cloud steps on object storage in the same deployment, set [stepop] "
        "sagemaker_artifact_root, vertex_artifact_root or azureml_artifact_root for them and "
        "leave [stepop] artifact_root local (or unset)."
    )
