"""Process mode of the local backend: the step runs as a detached process of the worker,
under ``supervisor``. Its environment, its start (with the lock that tells whether it still
runs), and its stop, which also reaches a step that outlived its supervisor. Container mode is
``container``'s; what both modes share is ``job``'s.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_stepop.artifacts.caches import job_cache_environment
from airflow_stepop.backends.bootstrap import bootstrap_environment
from airflow_stepop.backends.local import supervisor
from airflow_stepop.backends.local.job import CHECKPOINT_ENV, checkpoint_dir, runtime_arguments
from airflow_stepop.runtime.spec import MAX_RUNTIME_ENV

if TYPE_CHECKING:
    from airflow_stepop.backends.base import JobRequest

STOP_GRACE_SECONDS = 10.0
LOCK_FILE = "lock"
_APPEND = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC


def job_environment(
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


def start_process(
    python: str, request: JobRequest, job_dir: Path, bundle: Path, max_runtime_s: int | None
) -> dict[str, Any]:
    """Start the step under its supervisor, detached (its own session), and return its
    handle: the job outlives the worker, and the held lock tells whether it still runs."""
    command = [
        python,
        supervisor.__file__,  # by path: it imports nothing, whatever PYTHONPATH says
        str(job_dir),
        "--",
        python,
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
                env=job_environment(request, checkpoint_dir(request), max_runtime_s, scratch),
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


def stop_process(job_dir: Path, group: int) -> None:
    """Stop a process-mode job: SIGTERM to its supervisor (which forwards it to the step), then
    SIGKILL to the job's process group when it outlasts ``STOP_GRACE_SECONDS``. ``group`` is
    the supervisor's pid, which leads the job's session and group."""
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile: nothing to stop
        if supervisor_alive(job_dir):  # alive means the pid is still our supervisor's
            os.kill(group, signal.SIGTERM)  # the supervisor forwards it to the step
            if _still(lambda: supervisor_alive(job_dir)):
                os.killpg(group, signal.SIGKILL)
                return
        # A step that outlived its supervisor (killed with SIGKILL) is stopped by its own
        # pid, and only while that pid is still the step's. It is in the job's group, so
        # the group is the job's (no process gets a group's id while the group has members).
        step = orphan_step(job_dir, group)
        if step is not None:
            os.kill(step, signal.SIGTERM)
            if _still(lambda: orphan_step(job_dir, group) is not None):
                os.killpg(group, signal.SIGKILL)


def supervisor_alive(job_dir: Path) -> bool:
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


def orphan_step(job_dir: Path, group: int) -> int | None:
    """The pid of the job's step when it still runs with no supervisor, else None.

    The step is the process child.pid names, if it still has the start time recorded there
    and is in the job's process group: a pid reused by another process has another start
    time. Without a recorded start time (no /proc) nothing is known for sure: None.
    """
    if supervisor_alive(job_dir):
        return None
    try:
        pid, start = (job_dir / supervisor.CHILD_PID).read_text().split()
    except (FileNotFoundError, ValueError):
        return None
    return int(pid) if supervisor.process_stat(int(pid)) == (start, group) else None
