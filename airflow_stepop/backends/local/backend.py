"""The local backend: a step runs as a detached local process, or in a local container.

Process mode starts ``python -m airflow_stepop.runtime SPEC`` under a small supervisor in its
own session, so the job outlives the worker that started it and its exit code is recorded
(``supervisor``; its start and stop: ``process``). Container mode runs the same command in a
container of the step's environment image (docker SDK), with the artifact root mounted at the
same path and GPUs requested when ``gpu_count`` is set (``container``, imported only for such a
step). Job records live under ``[stepop] local_jobs_dir``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_stepop.backends.base import (
    JobNameTakenError,
    JobRecord,
    JobRequest,
    JobStatus,
    StepBackend,
)
from airflow_stepop.backends.local import process_logs, supervisor
from airflow_stepop.backends.local.job import exit_status, local_bundle
from airflow_stepop.backends.local.process import (
    STOP_GRACE_SECONDS,
    orphan_step,
    start_process,
    stop_process,
    supervisor_alive,
)
from airflow_stepop.backends.naming import key_prefix
from airflow_stepop.runtime.spec import RESULT_NAME
from airflow_stepop.runtime.storage import Storage, join

if TYPE_CHECKING:
    from airflow_stepop.settings import DockerSettings

log = logging.getLogger(__name__)

JOB_RECORD = "job.json"  # the job's handle, and what only the record keeps (RECORD_ONLY)
RECORD_ONLY = frozenset({"try_id", "spec_sha256"})


def _warn_unapplied_resources(request: JobRequest) -> None:
    """Process mode reserves and checks nothing: say so in the task log when resources are set.

    A warning, not an error: a step declared for a cloud service (or a GPU container) is also
    run as a process on a workstation to test it, and whether a GPU is usable (drivers,
    CUDA_VISIBLE_DEVICES, another process holding it) is only known to the step itself.
    """
    resources = request.resources
    if resources is None or not (resources.gpu_count or resources.cpu_count or resources.memory):
        return
    log.warning(
        "Process mode does not reserve or check resources: %s is not applied "
        "to job %s, which shares the worker's CPUs, memory and GPUs (if it has any) with "
        "everything else running there. For limits and reserved GPUs, set "
        "docker=DockerSettings(...) (container mode; GPUs need the NVIDIA Container Toolkit on "
        "the worker host) or run the step on a cloud backend.",
        resources.shown(),
        request.job_name,
    )


class LocalBackend(StepBackend):
    """Jobs as local processes or containers.

    ``max_runtime_s`` is the job's own limit, which no local "service" enforces: the step's
    runtime ends itself when it passes it (``STEPOP_MAX_RUNTIME_S``), the backstop for a job
    that no trigger watches, as a cloud service's runtime limit is.
    """

    def __init__(
        self, jobs_dir: str, python: str | None = None, max_runtime_s: int | None = None
    ) -> None:
        self.jobs_dir = Path(jobs_dir)
        self.python = python or sys.executable
        self.max_runtime_s = max_runtime_s
        self._client: Any = None  # the container engine's, made at the first call that needs it
        self._client_lock = threading.Lock()  # the triggerer calls from several threads

    def serialize(self) -> dict[str, Any]:
        return {
            "jobs_dir": str(self.jobs_dir),
            "python": self.python,
            "max_runtime_s": self.max_runtime_s,
        }

    # ---- worker side -------------------------------------------------------------------

    def submit(self, request: JobRequest) -> dict[str, Any]:
        bundle = local_bundle(request)
        job_dir = self.jobs_dir / request.job_name
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        try:
            job_dir.mkdir()
        except FileExistsError:  # a job of this name: this try's own, or another's
            return self._existing(request, job_dir)
        # Creating a container copies its image's files on some storage drivers (vfs): tens of
        # seconds on a busy host, so the worker's submit waits longer than the trigger's calls.
        if request.docker is not None and (client := _engine(timeout=120)) is not None:
            from airflow_stepop.backends.local import container as container

            with contextlib.closing(client):  # its own: a longer timeout than the polls'
                handle = container.submit(
                    client, request, job_dir, bundle, max_runtime_s=self.max_runtime_s
                )
        else:
            if request.docker is not None:
                log.warning("docker= is set but no container engine answers: running as a process")
            _warn_unapplied_resources(request)
            handle = start_process(self.python, request, job_dir, bundle, self.max_runtime_s)
        record = {**handle, "spec_sha256": request.spec_sha256}
        if request.try_id:
            record["try_id"] = request.try_id
        (job_dir / JOB_RECORD).write_bytes(json.dumps(record).encode())
        return handle

    @staticmethod
    def _existing(request: JobRequest, job_dir: Path) -> dict[str, Any]:
        """The handle of this try's own job of the request's name; another's is never taken."""
        try:
            record = json.loads((job_dir / JOB_RECORD).read_bytes())
        except (OSError, ValueError):  # being submitted, or left half-made: not this try's
            record = {}
        if record and request.owns(record.get("try_id")):
            return {k: v for k, v in record.items() if k not in RECORD_ONLY}
        raise JobNameTakenError(request.job_name, record.get("try_id"))

    def environment_id(self, docker: DockerSettings | None) -> str:
        """A container of the image, or (no ``docker=``, or no engine answers: ``submit`` runs
        a process then) the interpreter, whose installed packages are not in it (README)."""
        if docker is not None and (client := _engine(timeout=10)) is not None:
            client.close()
            return super().environment_id(docker)
        return f"process:{self.python}"

    def job_record(self, job_id: str) -> JobRecord:
        """The record the job's directory under ``[stepop] local_jobs_dir`` keeps (the worker's
        own disk, not the artifact store), and its exit code there."""
        if not job_id or "/" in job_id or job_id.strip(".") == "":
            raise FileNotFoundError(f"no local job is named {job_id!r}")
        job_dir = self.jobs_dir / job_id
        record = json.loads((job_dir / JOB_RECORD).read_bytes())
        handle = {k: v for k, v in record.items() if k not in RECORD_ONLY}
        exit_file = job_dir / supervisor.EXIT_CODE
        if exit_file.exists():  # a container's is kept when it is removed
            status = exit_status(int(exit_file.read_text()), (job_dir / "stop_requested").exists())
        else:
            status = self._status(handle)
        return JobRecord(status, record.get("spec_sha256"), handle)

    def find_active(self, task_key: str) -> dict[str, Any] | None:
        prefix = key_prefix(task_key)
        if not self.jobs_dir.is_dir():
            return None
        for job_dir in sorted(self.jobs_dir.glob(f"{prefix}-t*"), reverse=True):
            record = job_dir / JOB_RECORD
            if not record.exists():
                continue
            handle = json.loads(record.read_text())
            handle = {k: v for k, v in handle.items() if k not in RECORD_ONLY}
            if handle.get("task_key") == task_key and not self._status(handle).terminal:
                return handle
        return None

    def stop(self, handle: dict[str, Any]) -> None:
        job_dir = Path(handle["job_dir"])
        (job_dir / "stop_requested").touch()
        if handle["mode"] == "container":
            from airflow_stepop.backends.local import container as container

            container.stop(self._engine_client(), handle, timeout=STOP_GRACE_SECONDS)
            return
        stop_process(job_dir, handle["pid"])

    def release(self, handle: dict[str, Any]) -> None:
        """Remove a finished container; the worker's last call for the job, so the engine's
        client is closed too (a later call makes a new one)."""
        if handle["mode"] == "container":
            from airflow_stepop.backends.local import container as container

            try:
                container.release(self._engine_client(), handle)
            finally:
                self._close_engine()

    async def aclose(self) -> None:
        await asyncio.to_thread(self._close_engine)

    def _engine_client(self) -> Any | None:
        """This backend's client of the container engine: one for all its calls (a new client
        pings the engine and opens a connection), made when first needed. None while no engine
        answers (asked again at the next call)."""
        with self._client_lock:
            if self._client is None:
                self._client = _engine()
            return self._client

    def _close_engine(self) -> None:
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # ---- state and logs ------------------------------------------------------------------

    def _status(self, handle: dict[str, Any]) -> JobStatus:
        job_dir = Path(handle["job_dir"])
        stopped = (job_dir / "stop_requested").exists()
        if handle["mode"] == "container":
            from airflow_stepop.backends.local import container as container

            return container.status(self._engine_client(), handle, stopped)
        exit_file = job_dir / supervisor.EXIT_CODE
        if exit_file.exists():
            return exit_status(int(exit_file.read_text()), stopped)
        if supervisor_alive(job_dir):
            return JobStatus("running", stopping=stopped)
        if exit_file.exists():  # ended between the two checks
            return exit_status(int(exit_file.read_text()), stopped)
        if orphan_step(job_dir, handle["pid"]) is not None:
            return JobStatus("running", stopping=stopped)  # its supervisor was killed, not it
        if stopped:  # stopped so early that the supervisor had no time to record an exit code
            return JobStatus("stopped", "stopped on request")
        # No exit code: its supervisor was killed. The step wrote its result manifest last, so
        # one there means it ran to its end (an orphaned step outlives the supervisor).
        if Storage().exists(join(handle["run_uri"], RESULT_NAME)):
            return JobStatus("succeeded")
        return JobStatus("failed", "the job's supervisor process disappeared (killed or lost)")

    def _logs(self, handle: dict[str, Any], cursor: Any) -> tuple[list[str], Any]:
        if handle["mode"] == "container":
            from airflow_stepop.backends.local import container as container

            return container.logs(self._engine_client(), handle, cursor)
        job_dir = Path(handle["job_dir"])
        ended = (job_dir / supervisor.EXIT_CODE).exists()  # first: then the log read is whole
        return process_logs.read(job_dir / supervisor.OUTPUT_LOG, cursor, ended=ended)

    async def astatus(self, handle: dict[str, Any]) -> JobStatus:
        return await asyncio.to_thread(self._status, handle)

    async def astatuses(self, handles: list[dict[str, Any]]) -> dict[str, JobStatus]:
        """Every watched job's record read in one thread: one hop per round, not one per job."""
        return await asyncio.to_thread(lambda: {h["job_id"]: self._status(h) for h in handles})

    async def alogs(self, handle: dict[str, Any], cursor: Any) -> tuple[list[str], Any]:
        return await asyncio.to_thread(self._logs, handle, cursor)

    async def astop(self, handle: dict[str, Any]) -> None:
        await asyncio.to_thread(self.stop, handle)


def _engine(timeout: int = 30) -> Any | None:
    """A client of the container engine, or None when none answers."""
    from airflow_stepop.images.builder import engine_client

    return engine_client(timeout=timeout)
