"""What a local job's two modes share: where its code and checkpoints are, and how it ended.

Process mode (``backend.py``) and container mode (``container.py``) both run the step from the
code bundle on the worker's disk with ``$STEPOP_CHECKPOINT_DIR`` set, and read the step's exit
code the same way.
"""

from __future__ import annotations

import signal
from pathlib import Path

from airflow_stepop.backends.base import JobRequest, JobStatus
from airflow_stepop.backends.bootstrap import CheckedFile, bootstrap_arguments
from airflow_stepop.runtime.spec import MAX_RUNTIME_EXIT_CODE
from airflow_stepop.runtime.storage import Storage

CHECKPOINT_ENV = "STEPOP_CHECKPOINT_DIR"


def checkpoint_dir(request: JobRequest) -> str:
    """The task instance's checkpoint directory (created), shared by its tries as on the clouds:
    a step that resumes from ``$STEPOP_CHECKPOINT_DIR`` runs locally unchanged."""
    path = Storage().local_path(request.checkpoint_uri)
    assert path is not None  # under the run's root, which local_bundle found local
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def runtime_arguments(request: JobRequest, bundle: Path) -> list[str]:
    """The interpreter's arguments that run the step: the bootstrap, which checks the code
    bundle against the digest the worker staged (the artifact root may be shared, and a file
    there rewritten) and runs the step runtime from its checked copy."""
    checked = [CheckedFile("code.zip", str(bundle), request.code_sha256)]
    return bootstrap_arguments(checked, ["-m", "airflow_stepop.runtime", request.spec_uri])


def local_bundle(request: JobRequest) -> Path:
    path = Storage().local_path(request.code_uri)
    if path is None:
        raise ValueError(
            f"The local backend runs jobs from a local code bundle, but artifact_root gives "
            f"{request.code_uri!r}. Use a file:// artifact_root with LocalStepOperator."
        )
    return path


def exit_status(code: int, stopped: bool) -> JobStatus:
    if code == 0:
        return JobStatus("succeeded")
    if stopped:
        return JobStatus("stopped", "stopped on request")
    if code == MAX_RUNTIME_EXIT_CODE or code == -signal.SIGALRM:
        return JobStatus(
            "failed",
            "the job ran past its max_runtime (the operator's max_runtime argument; by "
            "default the task's execution_timeout plus 5 minutes) and was ended",
        )
    if code < 0:
        return JobStatus("failed", f"the step process was killed by signal {-code}")
    return JobStatus("failed", f"the step process exited with code {code}")
