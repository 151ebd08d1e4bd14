"""The Vertex AI backend: a step runs as a Vertex AI CustomJob (request: ``job.py``).

* worker side: the official JobService REST client (CreateCustomJob retried on throttling and
  5xx without ever creating twice, ListCustomJobs by the task's label to re-attach, Artifact
  Registry login for built images);
* triggerer side (``triggerer_calls.py``, inherited): the async JobService REST client
  (``astatus``: GetCustomJob; ``astatuses``: ListCustomJobs pages of 100 jobs' states per poll
  for many jobs), Cloud Logging ``entries:list`` at a bounded rate with a (timestamp, insertId)
  cursor, CancelCustomJob on kill and timeout.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_stepop.backends.base import (
    JobRecord,
    JobRequest,
    JobStatus,
    MachineChoice,
    NoCapacityError,
    PreparedJob,
    StepBackend,
    service_refusal,
)
from airflow_stepop.backends.bootstrap import TRY_ID_ENV, read_staged_spec
from airflow_stepop.backends.naming import task_digest
from airflow_stepop.backends.ratelimit import list_limiter
from airflow_stepop.backends.vertex.api import (
    ALIVE,
    GoogleAccess,
    is_transient_error,
    machine_quota,
    map_state,
)
from airflow_stepop.backends.vertex.config import VertexJobConfig
from airflow_stepop.backends.vertex.job import (
    ENTRY_FILE,
    VertexConfigError,
    billing,
    build_job,
    container_env,
    epoch,
    hourly_price,
    job_details,
    rfc3339,
)
from airflow_stepop.backends.vertex.machines import CATALOG, machine_name, split_machine
from airflow_stepop.backends.vertex.triggerer_calls import VertexTriggererCalls
from airflow_stepop.runtime.spec import SPEC_SHA256_ENV
from airflow_stepop.runtime.storage import join

if TYPE_CHECKING:
    from airflow_stepop.images.builder import ImageChoice
    from airflow_stepop.settings import DockerSettings

log = logging.getLogger(__name__)

CREATE_ATTEMPTS = 6
CONSOLE = "https://console.cloud.google.com"


class VertexBackend(VertexTriggererCalls, StepBackend):
    """Runs steps as Vertex AI CustomJobs through the google provider's connection."""

    first_poll_seconds = 5.0  # a CustomJob takes minutes to provision
    billing_xcom_key = "vertex_billing"

    def __init__(
        self,
        gcp_conn_id: str = "google_cloud_default",
        project_id: str | None = None,
        location: str | None = None,
        impersonation_chain: list[str] | None = None,
        job: VertexJobConfig | None = None,
    ) -> None:
        self.gcp_conn_id = gcp_conn_id
        self.project_id = project_id
        self.location = location
        self.impersonation_chain = list(impersonation_chain or [])
        self.job = job
        self.access = GoogleAccess(
            gcp_conn_id, tuple(self.impersonation_chain), project_id, location
        )
        self._state: dict[str, str] = {}  # job id -> last JobStatus.state seen
        self._final: dict[str, float] = {}  # job id -> when it ended (epoch seconds)

    def serialize(self) -> dict[str, Any]:
        return self.access.arguments()

    def poll_group(self) -> str:
        return f"vertex:{self.gcp_conn_id}:{self.project_id or ''}:{self.location or ''}"

    def billing(self, details: dict[str, Any]) -> dict[str, Any] | None:
        return billing(details)

    # ---- worker side -------------------------------------------------------------------

    def _retry(self) -> Any:
        from google.api_core.retry import Retry

        return Retry(predicate=is_transient_error, initial=0.5, maximum=8.0, timeout=120.0)

    def _list(self, filter_text: str) -> list[Any]:
        list_limiter(self.poll_group()).acquire()
        pager = self.access.jobs.list_custom_jobs(
            request={"parent": self.access.parent, "filter": filter_text, "page_size": 50},
            retry=self._retry(),
        )
        return list(pager.custom_jobs)

    def prepare(self, request: JobRequest) -> PreparedJob:
        """Stage the entry script, decide the image (built by the worker's engine, or by Cloud
        Build while the task is deferred) and make the CreateCustomJob request."""
        if self.job is None:
            raise RuntimeError("VertexBackend.prepare needs a job configuration")
        from airflow_stepop.artifacts.storage import worker_storage

        # a failover's next machine (``machine_choices``): the body, price and handle name it
        job = self.job.on_machine(request.machine) if request.machine else self.job
        storage = worker_storage(self.gcp_conn_id)
        spec = read_staged_spec(storage, request)
        image = self._image(request, storage)
        access = self.access
        entry_source = (Path(__file__).parent / "entry.py").read_bytes()
        body = build_job(
            request, spec, job, image.reference, access.project, access.region, entry_source
        )
        storage.write_bytes(join(request.run_uri, ENTRY_FILE), entry_source)
        prepared = {
            "custom_job": body,
            "name": request.job_name,
            "task_key": request.task_key,
            "try_id": request.try_id,
            "image": image.reference,
            "image_built": image.built or image.build is not None,
            "price_per_hour": job.price_per_hour,
            "experiment": job.experiment,
            # created by a trigger after the build: one resumed by another triggerer creates
            # it again, and display names are not unique, so it looks for its own first
            "look_first": image.build is not None,
        }
        return PreparedJob(prepared, image.build)

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        try_id = body.get("try_id") or ""
        created = self._own(body["custom_job"]["display_name"], try_id) if (
            body.get("look_first") and try_id
        ) else None  # fmt: skip
        created = created or self._create(body["custom_job"], try_id)
        handle = self.handle_of(created, body["task_key"], body.get("price_per_hour"),
                                body.get("experiment"))  # fmt: skip
        log.info("CustomJob %s (%s): %s, image %s", handle["job_id"], body["name"],
                 handle["machine"], body["image"])  # fmt: skip
        return {**handle, "image": body["image"], "image_built": body["image_built"]}

    def _create(self, body: dict[str, Any], try_id: str) -> Any:
        """CreateCustomJob, retried on throttling and 5xx; never twice for one try.

        A create whose answer was lost may have made the job: one of this display name that
        carries this try's id is it. Display names need not be unique on Vertex AI: one of
        another run's or try's is no answer, and the create is retried. One refused for the
        project's quota of its machines (``api.machine_quota``) is not retried: it raises
        ``NoCapacityError``, and the step fails over to its next machine."""
        for attempt in range(CREATE_ATTEMPTS):
            try:
                return self.access.jobs.create_custom_job(
                    parent=self.access.parent, custom_job=body
                )
            except Exception as exc:
                if getattr(exc, "code", None) == 400:  # a machine type Vertex lacks, say
                    raise self._refusal(exc, body) from exc
                quota = machine_quota(exc)
                if quota is not None:  # 429 RESOURCE_EXHAUSTED for a machine quota, not a rate
                    reason = getattr(exc, "message", None) or str(exc)
                    raise NoCapacityError(
                        _machine_of(body), f"RESOURCE_EXHAUSTED ({quota}): {reason}"
                    ) from exc
                if not is_transient_error(exc) or attempt == CREATE_ATTEMPTS - 1:
                    raise
                if getattr(exc, "code", None) != 429:  # a lost answer may have created it
                    name = body["display_name"]
                    for found in self._list(f'display_name="{name}"'):
                        if not try_id or container_env(found).get(TRY_ID_ENV) == try_id:
                            return found
                delay = min(30.0, 0.5 * 2**attempt) * random.uniform(0.5, 1.0)
                log.warning("CreateCustomJob failed (%s); retrying in %.1fs", exc, delay)
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _own(self, display_name: str, try_id: str) -> Any:
        """This try's CustomJob of the name, if one exists already (None if not)."""
        for found in self._list(f'display_name="{display_name}"'):
            if container_env(found).get(TRY_ID_ENV) == try_id:
                log.info("CustomJob %s of this try exists already; attaching to it", display_name)
                return found
        return None

    def _refusal(self, exc: Any, body: dict[str, Any]) -> Exception:
        from airflow_stepop.catalog import load

        known = {split_machine(m.name)[0] for m in load(CATALOG).types}
        reason = getattr(exc, "message", None) or str(exc)
        machine_type = split_machine(_machine_of(body) or "")[0] or None
        return service_refusal("Vertex AI", reason, "machine_type", machine_type, known)

    def machine_choices(self) -> tuple[MachineChoice, ...]:
        """The step's machine (catalog form, ``n1-standard-4+NVIDIA_TESLA_T4x1``), then its
        ``fallback_types``; each priced for the whole job (every replica, Spot if spot). ()
        on a persistent resource: its machines are the resource's, nothing to choose."""
        if self.job is None or not self.job.machine_type or self.job.persistent_resource_id:
            return ()
        names = dict.fromkeys((self.job.machine, *self.job.fallback_types))  # in order, once
        replicas = self.job.replica_count
        choices = []
        for name in names:
            price = self.job.on_machine(name).price_per_hour
            choices.append(MachineChoice(name, None if price is None else price * replicas))
        return tuple(choices)

    def handle_of(
        self,
        job: Any,
        task_key: str,
        price: float | None = None,
        experiment: str | None = None,
    ) -> dict[str, Any]:
        """The handle of a CustomJob; ``price`` (of one replica) and ``experiment`` as the
        step's configuration has them (None for a job found by a retry)."""
        details = job_details(job)
        env = container_env(job)
        run_uri = env.get("STEPOP_SPEC_URI", "").rsplit("/", 1)[0]
        replicas = details["replica_count"]
        machine = details["machine_type"]
        if details["accelerator_type"]:
            machine += f" + {details['accelerator_count']} x {details['accelerator_type']}"
        if replicas > 1:
            machine += f", {replicas} replicas"
        return {
            "job_id": job.name.rsplit("/", 1)[1],
            "name": job.name,
            "display_name": job.display_name,
            "task_key": task_key,
            "run_uri": run_uri,
            "output_uri": run_uri,
            "create_time": rfc3339(job.create_time),
            "replicas": replicas,
            "machine": machine + (", spot" if details["spot"] else ""),
            "price_per_hour": None if price is None else round(price * replicas, 6),
            "project": job.name.split("/")[1],
            "location": job.name.split("/")[3],
            "experiment": experiment,
        }

    def _image(self, request: JobRequest, storage: Any) -> ImageChoice:
        """The job's image (``image.job_image``)."""
        from airflow_stepop.backends.vertex.image import job_image

        return job_image(self, request, storage)

    def find_active(self, task_key: str) -> dict[str, Any] | None:
        jobs = self._list(f'labels.stepop_task="{task_digest(task_key)}"')
        for job in jobs:  # newest first
            if job.state.name in ALIVE:
                price = hourly_price(job_details(job))  # its own machine: a failover's, maybe
                experiment = self.job.experiment if self.job is not None else None
                return self.handle_of(job, task_key, price, experiment)
        return None

    def status(self, handle: dict[str, Any]) -> JobStatus:
        """One GetCustomJob from the worker (a retry deciding to re-attach or reuse)."""
        return self._status(
            self.access.jobs.get_custom_job(name=handle["name"], retry=self._retry())
        )

    def environment_id(self, docker: DockerSettings | None) -> str:
        if self.job is not None and self.job.image_uri:  # keyed by its name: see the README
            return f"image:{self.job.image_uri}"
        return super().environment_id(docker)

    def job_record(self, job_id: str) -> JobRecord:
        """One GetCustomJob in this backend's project and region."""
        access = self.access
        name = f"projects/{access.project}/locations/{access.region}/customJobs/{job_id}"
        job = self.access.jobs.get_custom_job(name=name, retry=self._retry())
        pools = job.job_spec.worker_pool_specs
        spec_sha256 = container_env(job).get(SPEC_SHA256_ENV) if pools else None
        return JobRecord(self._status(job), spec_sha256, self.handle_of(job, task_key=""))

    def stop(self, handle: dict[str, Any]) -> None:
        from google.api_core import exceptions

        with contextlib.suppress(exceptions.FailedPrecondition, exceptions.BadRequest):
            self.access.jobs.cancel_custom_job(name=handle["name"], retry=self._retry())

    def links(self, handle: dict[str, Any]) -> dict[str, str]:
        project, location, job_id = handle["project"], handle["location"], handle["job_id"]
        query = f'resource.type="ml_job"\nresource.labels.job_id="{job_id}"'
        from urllib.parse import quote

        out = {
            "job": f"{CONSOLE}/vertex-ai/locations/{location}/training/{job_id}/cpu"
            f"?project={project}",
            "logs": f"{CONSOLE}/logs/query;query={quote(query, safe='')}?project={project}",
        }
        if handle.get("experiment"):
            experiment = handle["experiment"]
            out["experiment"] = (
                f"{CONSOLE}/vertex-ai/experiments/locations/{location}/experiments/{experiment}/"
                f"runs?project={project}"
            )
        return out

    def is_transient(self, exc: Exception) -> bool:
        return is_transient_error(exc)

    def is_gone(self, exc: Exception) -> bool:
        from google.api_core.exceptions import NotFound

        return isinstance(exc, NotFound)

    # ---- a job's state, for both sides -------------------------------------------------

    def _status(self, job: Any) -> JobStatus:
        """The job's status; an ended job's facts when ``job`` carries its spec (a describe)."""
        status = map_state(job.state.name, job.error.message or None, job.error.code)
        if status.state == "pending" and job.job_spec.scheduling.strategy.name == "FLEX_START":
            status = replace(status, queued=True)  # Dynamic Workload Scheduler's queue
        job_id = job.name.rsplit("/", 1)[1]
        self._state[job_id] = status.state
        if status.terminal:
            ended = rfc3339(job.end_time)
            # the next alogs call reads everything left, once late entries had time to arrive
            self._final.setdefault(job_id, epoch(ended) if ended else time.time())
            if job.job_spec.worker_pool_specs:
                status = replace(status, details=job_details(job))
        return status


def _machine_of(body: dict[str, Any]) -> str | None:
    """The machine choice (``machine_name``) a CustomJob body's first worker pool asks for."""
    pools = body.get("job_spec", {}).get("worker_pool_specs") or [{}]
    spec = pools[0].get("machine_spec") or {}
    if not spec.get("machine_type"):
        return None
    return machine_name(
        spec["machine_type"], spec.get("accelerator_type"), spec.get("accelerator_count") or 0
    )


__all__ = ["VertexBackend", "VertexConfigError"]
