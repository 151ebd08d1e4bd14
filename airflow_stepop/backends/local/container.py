"""The local backend's container mode: a step runs in a container of its environment image.

The same command as process mode, in a container (docker SDK) of the step's environment image,
with the artifact root mounted at the same path and GPUs requested when ``gpu_count`` is set.
``backend.py`` imports this module only for a step with ``docker=`` or a container's handle, so a
task that starts a process loads none of it.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

from airflow_stepop.backends.base import JobRequest, JobStatus
from airflow_stepop.backends.bootstrap import bootstrap_environment
from airflow_stepop.backends.local import container_logs
from airflow_stepop.backends.local.job import (
    CHECKPOINT_ENV,
    checkpoint_dir,
    exit_status,
    local_bundle,
    runtime_arguments,
)
from airflow_stepop.backends.local.supervisor import EXIT_CODE
from airflow_stepop.backends.naming import key_prefix
from airflow_stepop.runtime.spec import MAX_RUNTIME_ENV
from airflow_stepop.runtime.storage import Storage
from airflow_stepop.setting_values import shown_size

log = logging.getLogger(__name__)

TASK_KEY_LABEL = "airflow-stepop.task-key"


class ContainerStartError(RuntimeError):
    """The engine created the step's container but could not start it (e.g. no GPU runtime)."""


class ParentImageError(RuntimeError):
    """The engine has no ``DockerSettings.parent_image`` and cannot pull it."""


def submit(
    client: Any, request: JobRequest, job_dir: Path, bundle: Path, max_runtime_s: int | None
) -> dict[str, Any]:
    """Start the step's container (building its image first if needed); return its handle."""
    import docker.types

    from airflow_stepop.images.builder import BuildOptions, ensure_image

    assert request.docker is not None
    options = BuildOptions.from_config()
    image, built = ensure_image(request.docker, client, options=options)
    root = Storage().local_path(request.run_uri)
    assert root is not None
    artifact_root = _artifact_root_dir(root, request)
    resources = request.resources
    kwargs: dict[str, Any] = {}
    if resources is not None and resources.gpu_count:
        kwargs["device_requests"] = [
            docker.types.DeviceRequest(count=resources.gpu_count, capabilities=[["gpu"]])
        ]
        if resources.gpu_type:  # the engine asks for a count; it knows no models
            log.warning(
                "The container engine does not pick GPUs by model: gpu_type=%r is not applied "
                "to job %s, which gets %d GPU(s) of whatever models this worker has.",
                resources.gpu_type, request.job_name, resources.gpu_count,
            )  # fmt: skip
    if resources is not None and resources.cpu_count:
        kwargs["nano_cpus"] = resources.cpu_count * 10**9
    if resources is not None and resources.memory_bytes:
        kwargs["mem_limit"] = resources.memory_bytes
    image_env = _image_environment(client, image)
    env = dict(request.environment)
    pythonpath = env.get("PYTHONPATH", image_env.get("PYTHONPATH"))
    if pythonpath:  # the bootstrap puts the checked bundle in front of it
        env["PYTHONPATH"] = pythonpath
    env.update(
        {
            **bootstrap_environment(request.spec_sha256, request.try_id),
            "PYTHONUNBUFFERED": "1",
            "HOME": env.get("HOME", "/tmp"),  # the worker's uid may not write the image's home
            CHECKPOINT_ENV: checkpoint_dir(request),  # the artifact root is mounted as is
        }
    )
    env.pop(MAX_RUNTIME_ENV, None)  # the backend's limit, as in process mode
    if max_runtime_s:
        env[MAX_RUNTIME_ENV] = str(max_runtime_s)
    container = _start(
        client,
        request,
        image,
        command=["python3", *runtime_arguments(request, bundle)],
        name=request.job_name,
        detach=True,
        environment=env,
        labels={TASK_KEY_LABEL: key_prefix(request.task_key), **request.labels},
        volumes={str(artifact_root): {"bind": str(artifact_root), "mode": "rw"}},
        user=f"{os.getuid()}:{os.getgid()}",
        working_dir="/tmp",
        **kwargs,
    )
    return {
        "job_id": request.job_name,
        "task_key": request.task_key,
        "mode": "container",
        "container_id": container.id,
        "image": image,
        "image_built": built,
        "run_uri": request.run_uri,
        "job_dir": str(job_dir),
    }


def _image_environment(client: Any, image: str) -> dict[str, str]:
    """The image's own environment (``ENV``), pulling an image the engine lacks (a parent image
    used as it is), as ``docker run`` would."""
    import docker.errors

    try:
        found = client.images.get(image)
    except docker.errors.ImageNotFound:
        try:
            found = client.images.pull(image)
        except docker.errors.APIError as exc:
            raise ParentImageError(_pull_failure(image, exc)) from None
    pairs = (entry.partition("=") for entry in found.attrs["Config"].get("Env") or ())
    return {name: value for name, _, value in pairs}


def _pull_failure(image: str, exc: Any) -> str:
    said = str(getattr(exc, "explanation", None) or exc)
    return (
        f"DockerSettings.parent_image={image!r} cannot be pulled by the container engine on "
        f"this worker (it said: {said}). Check the image's name and tag, and that the worker's "
        "engine can reach that registry and is logged in to it (docker login) if it is private."
    )


def _start(client: Any, request: JobRequest, image: str, **kwargs: Any) -> Any:
    """Create the step's container and start it; a container that fails to start is removed
    (nobody would come back for it) and the failure says why, in the step's terms.

    The engine's calls run in a thread of their own, which the task's interruptions
    (``AirflowTaskTimeout`` from the ``execution_timeout`` alarm, ``KeyboardInterrupt``) never
    reach: the engine goes on creating a container whose caller left (tens of seconds on vfs),
    so an interrupted task waits for the engine's answer, removes what it made, then re-raises.
    """
    import docker.errors

    outcome: dict[str, Any] = {}
    interrupted, done = threading.Event(), threading.Event()
    threading.Thread(
        target=_create_and_start,
        args=(client, image, kwargs, outcome, interrupted, done),
        name=f"stepop-start-{request.job_name}",
        daemon=True,
    ).start()
    # An Event, not Thread.join(): a join() interrupted by a signal handler's exception marks
    # the running thread as ended (CPython 3.11's bpo-45274 handling), so no later join() waits.
    try:
        done.wait()
    except BaseException:
        interrupted.set()  # a container created from now on is not started
        log.warning(
            "Interrupted while the container engine creates and starts container %s; waiting "
            "for it to finish, to remove the container",
            request.job_name,
        )
        done.wait()  # a second interruption gives up waiting (and removing)
        if outcome.get("container") is not None:
            log.warning(
                "Interrupted task's container %s: %s",
                request.job_name,
                _remove(outcome["container"]),
            )
        raise
    container, failure = outcome.get("container"), outcome.get("failure")
    if container is None:  # the engine made no container: nothing to remove
        raise failure
    if failure is not None:
        removed = _remove(container)
        if isinstance(failure, docker.errors.APIError):
            raise ContainerStartError(
                f"{_start_failure(request, image, failure)} {removed}"
            ) from None
        log.warning("%s", removed)
        raise failure
    return container


def _create_and_start(
    client: Any,
    image: str,
    kwargs: dict[str, Any],
    outcome: dict[str, Any],
    interrupted: threading.Event,
    done: threading.Event,
) -> None:
    """In the starting thread: ``outcome`` gets the container made, and the failure if any."""
    try:
        outcome["container"] = client.containers.create(image, **kwargs)
        if not interrupted.is_set():
            outcome["container"].start()
    except BaseException as exc:
        outcome["failure"] = exc
    finally:
        done.set()


def _remove(container: Any) -> str:
    """Remove a container that will not run the step; says how that went, for messages."""
    import docker.errors

    try:
        container.remove(force=True)
        return "The container was removed."
    except docker.errors.APIError as removal:
        return f"Removing the container failed too: {removal}"


def _start_failure(request: JobRequest, image: str, exc: Any) -> str:
    said = str(getattr(exc, "explanation", None) or exc)
    gpus = request.resources.gpu_count if request.resources is not None else None
    if gpus and any(word in said.lower() for word in ("gpu", "device driver", "nvidia")):
        return (
            f"The container of step job {request.job_name} could not start: "
            f"resources={request.resources.shown()} asks the container engine for "
            f"{gpus} GPU{'s' if gpus > 1 else ''}, and the engine on this worker cannot give "
            f"containers GPUs (it said: {said}). Install the NVIDIA Container Toolkit on the "
            "worker host and configure the engine for it (nvidia-ctk runtime configure), or "
            "drop gpu_count (and gpu_type) from ResourceSettings to run the step on CPU."
        )
    return f"The container of step job {request.job_name} (image {image}) could not start: {said}."


def stop(client: Any, handle: dict[str, Any], timeout: float) -> None:
    if client is None:
        return
    try:
        _container(client, handle).stop(timeout=int(timeout))
    except _engine_down():
        pass


def release(client: Any, handle: dict[str, Any]) -> None:
    """Remove the finished container (its logs were relayed), keeping its exit code in the
    job's directory, as a process job's supervisor does: the job's record outlives it."""
    if client is None:
        return
    import docker.errors

    try:
        container = _container(client, handle)
        state = container.attrs["State"]
        if state["Status"] == "exited" and not state.get("OOMKilled"):
            (Path(handle["job_dir"]) / EXIT_CODE).write_text(str(int(state.get("ExitCode", -1))))
        container.remove()
    except (docker.errors.NotFound, *_engine_down()):
        pass
    except docker.errors.APIError as exc:  # still running (a re-attached try owns it)
        log.warning("Could not remove container %s: %s", handle["job_id"], exc)


def status(client: Any, handle: dict[str, Any], stopped: bool) -> JobStatus:
    import docker.errors

    try:
        if client is not None:
            return container_status(_container(client, handle).attrs, stopped)
    except docker.errors.NotFound:
        return JobStatus("failed", f"container {handle['job_id']} no longer exists")
    except _engine_down():
        pass
    return JobStatus("failed", "the container engine does not answer")


def container_status(attrs: dict[str, Any], stopped: bool) -> JobStatus:
    """The step job's status from the container's ``inspect`` (``attrs``)."""
    state = attrs["State"]
    if state["Status"] in ("created", "running", "restarting", "paused"):
        return JobStatus("pending" if state["Status"] == "created" else "running", stopping=stopped)
    if state.get("OOMKilled"):
        return JobStatus("failed", _out_of_memory((attrs.get("HostConfig") or {}).get("Memory")))
    return exit_status(int(state.get("ExitCode", -1)), stopped)


def _out_of_memory(limit: int | None) -> str:
    """Why the kernel killed the step, and what raises the limit it hit: the limit is the
    container's own (``HostConfig.Memory``, from ``ResourceSettings(memory=...)``), or, with
    none (0), the worker host's memory, which other jobs share."""
    if not limit:
        return (
            "OOMKilled: the container ran out of memory; it had no memory limit of its own "
            "(no ResourceSettings(memory=...)), so the worker host's memory ran out: free "
            "memory on the host (fewer steps at once) or give the step less to hold."
        )
    return (
        f"OOMKilled: the container ran out of memory at its limit of {shown_size(limit)}; "
        "resources=ResourceSettings(memory=...) sets that limit: raise it, e.g. "
        f"memory={shown_size(2 * limit)!r}."
    )


def logs(client: Any, handle: dict[str, Any], cursor: Any) -> tuple[list[str], Any]:
    """The lines the container printed since ``cursor``, and the cursor to use next."""
    try:
        if client is not None:
            return container_logs.read(_container(client, handle), cursor)
    except _engine_down():
        pass
    return [], cursor


def _engine_down() -> tuple[type[Exception], ...]:
    """An engine that stopped answering (refused, timed out): treated as one that does not
    answer the client's first ping, i.e. as no engine."""
    import requests

    return (requests.exceptions.ConnectionError, requests.exceptions.Timeout)


def _artifact_root_dir(run_dir: Path, request: JobRequest) -> Path:
    """The common directory of the run and the code bundle: what a container must see."""
    bundle = local_bundle(request)
    return Path(os.path.commonpath([run_dir, bundle]))


def _container(client: Any, handle: dict[str, Any]) -> Any:
    return client.containers.get(handle.get("container_id") or handle["job_id"])
