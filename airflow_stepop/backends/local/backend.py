"""The local backend: a step runs as a detached local process, or in a local container.

Process mode starts ``python -m airflow_stepop.runtime SPEC`` under a small supervisor in its
own session, so the job outlives the worker that started it and its exit code is recorded
(``supervisor``). Container mode runs the same command in a container of the step's
environment image (docker SDK), with the artifact root mounted at the same path and GPUs
requested when ``gpu_count`` is set (``container``, imported only for such a step). Job
records live under ``[stepop] local_jobs_dir``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_stepop.artifacts.caches import job_cache_environment
from airflow_stepop.backends.base import (
    JobNameTakenError,
    JobRecord,
    JobRequest,
    JobStatus,
    StepBackend,
)
from airflow_stepop.backends.bootstrap import bootstrap_environment
from airflow_stepop.backends.local import process_logs, supervisor
from airflow_stepop.backends.local.job import (
    CHECKPOINT_ENV,
    checkpoint_dir,
    exit_status,
    local_bundle,
    runtime_arguments,
)
from airflow_stepop.backends.naming import key_prefix
from airflow_stepop.runtime.spec import MAX_RUNTIME_ENV, RESULT_NAME
from airflow_stepop.runtime.storage import Storage, join

if TYPE_CHECKING:
    from airflow_stepop.settings import DockerSettings

log = logging.getLogger(__name__)

STOP_GRACE_SECONDS = 10.0
LOCK_FILE = "lock"
JOB_RECORD = "job.json"  # the job's handle, and what only the record keeps (RECORD_ONLY)
RECORD_ONLY = frozenset({"try_id", "spec_sha256"})
_APPEND = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC


def _job_environment(
    request: JobRequest, checkpoints: str, max_runtime_s: int | None, scratch: Path
) -> dict[bytes, bytes]:
    """The worker's environment minus Airflow's own (connections, secrets), plus the step's.

    ``PYTHONPATH`` is the one ``environment`` gives, never the worker's (the bootstrap puts the
    checked code bundle in front of it): a module the bundle lacks fails here as it would in a
    cloud job.

    ``TMPDIR`` is the job's own scratch directory, which the supervisor removes when the step
    ends (the bootstrap's checked copy of the bundle goes there), unless ``environment`` sets it.

    As bytes, the form the process is started with: no decoding and encoding of every variable.
    """
    env = {k: v for k, v in os.environb.items() if not k.startswith(b"AIRFLOW")}
    env.pop(b"PYTHONPATH", None)
    env[b"TMPDIR"] = os.fsencode(scratch)
    # the job's caches (extracted code, inputs): private to the worker's user, and bounded
    for key, value in job_cache_environment().items():
        env[key.encode()] = os.fsencode(value)
    for key, value in request.environment.items():
        env[os.fsencode(key)] = os.fsencode(value)
    for key, value in bootstrap_environment(request.spec_sha256, request.try_id).items():
        env[key.encode()] = value.encode()
    env[b"PYTHONUNBUFFERED"] = b"1"
    env[CHECKPOINT_ENV.encode()] = os.fsencode(checkpoints)
    env.pop(MAX_RUNTIME_ENV.encode(), None)  # the backend's limit, never an inherited one
    if max_runtime_s:
        env[MAX_RUNTIME_ENV.encode()] = str(max_runtime_s).encode()
    return env


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
            handle = self._submit_process(request, job_dir, bundle)
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

    def _submit_process(self, request: JobRequest, job_dir: Path, bundle: Path) -> dict[str, Any]:
        command = [
            self.python,
            supervisor.__file__,  # by path: it imports nothing, whatever PYTHONPATH says
            str(job_dir),
            "--",
            self.python,
            *runtime_arguments(request, bundle),
        ]
        # The supervisor inherits a held lock on job_dir/lock: while any process holds it, the
        # job is alive; the kernel releases it however the supervisor ends (even SIGKILL).
        scratch = job_dir / supervisor.SCRATCH
        scratch.mkdir(mode=0o700)
        lock = os.open(job_dir / LOCK_FILE, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            # The supervisor's own output (it writes nothing unless it fails) goes to the log too.
            output = os.open(job_dir / supervisor.OUTPUT_LOG, _APPEND, 0o666)
            try:
                process = subprocess.Popen(
                    command,
                    env=_job_environment(
                        request, checkpoint_dir(request), self.max_runtime_s, scratch
                    ),
                    cwd=job_dir,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    pass_fds=(lock,),
                )
            finally:
                os.close(output)
        finally:
            os.close(lock)
        return {
            "job_id": request.job_name,
            "task_key": request.task_key,
            "mode": "process",
            "pid": process.pid,
            "run_uri": request.run_uri,
            "job_dir": str(job_dir),
        }

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
        group = handle["pid"]  # the supervisor's, which leads the job's session and group
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile: nothing to stop
            if _alive(job_dir):  # alive means the pid is still our supervisor's
                os.kill(group, signal.SIGTERM)  # the supervisor forwards it to the step
                if _still(lambda: _alive(job_dir)):
                    os.killpg(group, signal.SIGKILL)
                    return
            # A step that outlived its supervisor (killed with SIGKILL) is stopped by its own
            # pid, and only while that pid is still the step's. It is in the job's group, so
            # the group is the job's (no process gets a group's id while the group has members).
            step = _orphan_step(job_dir, group)
            if step is not None:
                os.kill(step, signal.SIGTERM)
                if _still(lambda: _orphan_step(job_dir, group) is not None):
                    os.killpg(group, signal.SIGKILL)

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
        if _alive(job_dir):
            return JobStatus("running", stopping=stopped)
        if exit_file.exists():  # ended between the two checks
            return exit_status(int(exit_file.read_text()), stopped)
        if _orphan_step(job_dir, handle["pid"]) is not None:
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


def _alive(job_dir: Path) -> bool:
    """Is the job's supervisor still running? (It holds the job's lock until it ends.)"""
    try:
        fd = os.open(job_dir / LOCK_FILE, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops the lock if we just took it
    return False


def _still(running: Callable[[], bool]) -> bool:
    """Whether ``running`` still holds after the stop's grace period (checked every 0.1 s)."""
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    while time.monotonic() < deadline and running():
        time.sleep(0.1)
    return running()


def _orphan_step(job_dir: Path, group: int) -> int | None:
    """The pid of the job's step when it still runs with no supervisor, else None.

    The step is the process child.pid names, if it still has the start time recorded there
    and is in the job's process group: a pid reused by another process has another start
    time. Without a recorded start time (no /proc) nothing is known for sure: None.
    """
    if _alive(job_dir):
        return None
    try:
        pid, start = (job_dir / supervisor.CHILD_PID).read_text().split()
    except (FileNotFoundError, ValueError):
        return None
    return int(pid) if supervisor.process_stat(int(pid)) == (start, group) else None


def _engine(timeout: int = 30) -> Any | None:
    """A client of the container engine, or None when none answers."""
    from airflow_stepop.images.builder import engine_client

    return engine_client(timeout=timeout)
