"""BaseStepOperator: ship one callable to a job, defer while it runs, return references.

A service's operator is a thin subclass that says which backend runs the job. Everything else
(packaging, inputs, the spec, re-attaching on retry, deferral, results and failures) lives here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Mapping
from datetime import timedelta
from typing import Any, ClassVar

from airflow.sdk import BaseOperator

from airflow_stepop import config
from airflow_stepop.artifacts.ref import ArtifactRef
from airflow_stepop.artifacts.storage import worker_storage
from airflow_stepop.backends.base import JobRequest, StepBackend
from airflow_stepop.backends.naming import job_name, task_key
from airflow_stepop.links.job import persist_links
from airflow_stepop.runtime import spec as specs
from airflow_stepop.runtime import values
from airflow_stepop.runtime.storage import Storage, join
from airflow_stepop.settings import DockerSettings, ResourceSettings, SettingsError
from airflow_stepop.triggers.step_job import StepJobTrigger

_TRACEBACK = "Traceback (most recent call last):"


class StepFailedError(RuntimeError):
    """The step's job failed; the message carries the remote exception and the job's log tail."""


class BaseStepOperator(BaseOperator):
    """Run ``python_callable`` as a job on a step backend; see the README for the arguments."""

    template_fields = ("op_args", "op_kwargs", "environment")
    # Cloud operators show links to the job's console page and logs (see links/job.py).
    operator_extra_links: tuple = ()
    ui_color = "#c8e6f5"

    # A backend's limits on job names (service rules).
    job_name_max_length: ClassVar[int] = 63

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        resources: ResourceSettings | None = None,
        docker: DockerSettings | None = None,
        artifact_root: str | None = None,
        deferrable: bool = True,
        poll_interval: float | None = None,
        environment: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        name = getattr(self, "custom_operator_name", None) or type(self).__name__
        if not callable(python_callable):
            raise SettingsError(f"{name}.python_callable={python_callable!r} is not callable.")
        if resources is not None and not isinstance(resources, ResourceSettings):
            raise SettingsError(
                f"{name}.resources={resources!r} must be a ResourceSettings, e.g. "
                "ResourceSettings(gpu_count=1, memory='16GiB')."
            )
        if docker is not None and not isinstance(docker, DockerSettings):
            raise SettingsError(
                f"{name}.docker={docker!r} must be a DockerSettings, e.g. "
                "DockerSettings(parent_image='python:3.11-slim', requirements=['numpy'])."
            )
        if poll_interval is not None and (
            isinstance(poll_interval, bool)
            or not isinstance(poll_interval, (int, float))
            or poll_interval <= 0
        ):
            raise SettingsError(f"{name}.poll_interval={poll_interval!r} must be seconds > 0.")
        if artifact_root is not None and (not isinstance(artifact_root, str) or not artifact_root):
            raise SettingsError(
                f"{name}.artifact_root={artifact_root!r} must be a URL such as "
                "'file:///data/stepop', 's3://bucket/prefix' or 'gs://bucket/prefix'."
            )
        self.python_callable = python_callable
        self.op_args = list(op_args or [])
        self.op_kwargs = dict(op_kwargs or {})
        self.resource_settings = resources
        self.docker_settings = docker
        self.artifact_root = artifact_root
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.environment = dict(environment or {})

    # ---- what a service's subclass provides ------------------------------------------------

    def make_backend(self) -> StepBackend:
        raise NotImplementedError

    @property
    def storage_conn_id(self) -> str | None:
        """The Airflow connection that reaches the artifact root (None: ambient credentials)."""
        return None

    # ---- execute ---------------------------------------------------------------------------

    def execute(self, context: Any) -> Any:
        backend = self.make_backend()
        ti = context["ti"]
        key = task_key(ti.dag_id, ti.run_id, ti.task_id, ti.map_index)
        handle = backend.find_active(key)
        if handle is not None:
            self.log.info(
                "Re-attaching to job %s, still running from an earlier try", handle["job_id"]
            )
        else:
            handle = backend.submit(self._prepare(context, key))
            self.log.info("Submitted job %s", handle["job_id"])
        persist_links(context, backend.links(handle))
        trigger = StepJobTrigger(
            backend_path=f"{type(backend).__module__}.{type(backend).__qualname__}",
            backend_kwargs=backend.serialize(),
            handle=handle,
            poll_interval=self.poll_interval or config.get_float("poll_interval"),
            deadline=self._deadline(),
        )
        if not self.deferrable:
            self._handle = (backend, handle)
            try:
                event = asyncio.run(_first_event(trigger))
            except BaseException:  # execution_timeout, SIGTERM...: the job must not outlive us
                backend.stop(handle)
                raise
            return self.execute_complete(context, event)
        self.defer(trigger=trigger, method_name="execute_complete")

    def _deadline(self) -> float | None:
        """execution_timeout as a wall-clock deadline, counted like Airflow's: from execute()."""
        if not isinstance(self.execution_timeout, timedelta):
            return None
        return time.time() + self.execution_timeout.total_seconds()

    def _prepare(self, context: Any, key: str) -> JobRequest:
        """Upload code and inputs, write the spec: everything the job reads."""
        from airflow_stepop.packaging.staging import StepIdentity, stage_step

        ti = context["ti"]
        staged = stage_step(
            self.python_callable,
            self.op_args,
            self.op_kwargs,
            root=self.artifact_root or config.artifact_root(),
            step=StepIdentity(ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number),
            storage=worker_storage(self.storage_conn_id),
            multiple_outputs=bool(self.multiple_outputs),
            inline_limit=config.get_int("inline_result_max_bytes"),
        )
        return JobRequest(
            job_name=job_name(key, ti.try_number, max_length=self.job_name_max_length),
            task_key=key,
            spec_uri=staged.spec_uri,
            run_uri=staged.run_uri,
            code_uri=staged.code_uri,
            resources=self.resource_settings,
            docker=self.docker_settings,
            environment=self.environment,
            labels={"dag_id": ti.dag_id, "task_id": ti.task_id},
        )

    # ---- completion ------------------------------------------------------------------------

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        handle = event["handle"]
        storage = worker_storage(self.storage_conn_id)
        try:
            if event["status"] == "succeeded":
                manifest = storage.read_json(join(_output_uri(handle), specs.RESULT_NAME))
                return values.decode(manifest["outputs"], ArtifactRef.from_record)
            raise self._failure(event, storage)
        finally:
            self._release(handle)

    def _release(self, handle: dict[str, Any]) -> None:
        """Free the finished job's resources; never hides the step's own result or error."""
        try:
            self.make_backend().release(handle)
        except Exception as exc:
            self.log.warning("Could not release job %s: %s", handle["job_id"], exc)

    def _failure(self, event: dict[str, Any], storage: Storage) -> Exception:
        handle = event["handle"]
        parts = [f"Step job {handle['job_id']} {event['status']}"]
        if event.get("reason"):
            parts[0] += f": {event['reason']}"
        error_uri = join(_output_uri(handle), specs.ERROR_NAME)
        error = None
        if storage.exists(error_uri):
            error = storage.read_json(error_uri)
            parts.append(f"The step raised {error['type']}: {error['message']}")
            parts.append("Remote traceback:\n" + error["traceback"].rstrip())
        tail = event.get("log_tail") or []
        if error is not None:  # the traceback is above already: keep what the job said before
            starts = [i for i, line in enumerate(tail) if _TRACEBACK in line]
            tail = tail[: starts[-1]] if starts else tail
        if tail:
            parts.append("Last lines of the job's log:\n" + "\n".join(tail))
        message = "\n\n".join(parts)
        if event["status"] == "timeout":
            from airflow.sdk.exceptions import AirflowTaskTimeout

            return AirflowTaskTimeout(message)
        return StepFailedError(message)

    def on_kill(self) -> None:
        """Non-deferrable mode: stop the job this worker is waiting for."""
        handle = getattr(self, "_handle", None)
        if handle is not None:
            backend, job = handle
            self.log.info("Stopping job %s", job["job_id"])
            backend.stop(job)


def _output_uri(handle: dict[str, Any]) -> str:
    """Where the job left its results: the run directory unless the backend says otherwise."""
    return handle.get("output_uri") or handle["run_uri"]


async def _first_event(trigger: StepJobTrigger) -> dict[str, Any]:
    async for event in trigger.run():
        return event.payload
    raise RuntimeError("the trigger ended without an event")
