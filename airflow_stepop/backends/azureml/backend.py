"""The Azure ML backend: a step runs as an Azure ML command job (see ``launch``).

* image: ``image_uri`` as given; else the ``DockerSettings`` image (content-hash tag), built on
  the worker's engine and pushed to ACR (or any registry) on a hash miss, or built by Azure ML
  itself from the same Dockerfile (an environment with a build context) when no engine answers
  (``[stepop] azureml_image_build``: auto/engine/service; ``image``);
* the environment and the job are PUT through Azure ML's REST API
  (``hooks/azureml_rest.py``); the job name is ``naming.job_name`` (per task instance and
  try); ``find_active`` re-attaches to a live job of the same task instance (List calls
  filtered by our tag, page by page until found); a named ``compute`` cluster is checked
  against the step first (``compute``);
* the triggerer side (``triggerer_calls.py``, inherited) is async (azure-core over aiohttp,
  ``azure.identity.aio``): one job GET per poll, or one List for all watched jobs of a
  workspace (``astatuses``); run history details for the final error and times, and for the
  log files, read at a bounded rate (``logs``).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_stepop.backends.azureml.compute import named_cluster
from airflow_stepop.backends.azureml.config import (
    CATALOG,
    TASK_TAG,
    AzureMLJobConfig,
    hourly_price,
    job_price_per_hour,
)
from airflow_stepop.backends.azureml.launch import (
    CLUSTER_PROPERTY,
    ENTRY_FILE,
    LAUNCH_FILE,
    TRY_PROPERTY,
    build_launch,
    job_body,
    launch_bytes,
    low_priority,
    map_status,
    studio_links,
)
from airflow_stepop.backends.azureml.logs import LogRelay
from airflow_stepop.backends.azureml.roots import (
    Datastore,
    DatastorePath,
    check_account,
    parse_datastore,
    resolve_datastore,
    storage_account,
)
from airflow_stepop.backends.azureml.triggerer_calls import AzureMLTriggererCalls
from airflow_stepop.backends.base import (
    JobNameTakenError,
    JobRecord,
    JobRequest,
    JobStatus,
    MachineChoice,
    StepBackend,
    billing_record,
    service_refusal,
)
from airflow_stepop.backends.bootstrap import read_staged_spec
from airflow_stepop.backends.naming import task_digest
from airflow_stepop.backends.ratelimit import list_limiter
from airflow_stepop.catalog import load as load_catalog
from airflow_stepop.hooks.azureml_fs import quiet_request_logs
from airflow_stepop.hooks.azureml_rest import is_transient_error
from airflow_stepop.runtime.spec import SPEC_SHA256_ENV
from airflow_stepop.runtime.storage import join

if TYPE_CHECKING:
    from airflow_stepop.settings import DockerSettings

log = logging.getLogger(__name__)
quiet_request_logs()  # the step's artifacts travel through Azure Blob (abfs://, az://)


class AzureMLBackend(AzureMLTriggererCalls, StepBackend):
    """Runs steps as Azure ML command jobs in the workspace of an ``azure_ml`` connection."""

    # A job takes a minute or more to get a machine: 5, 10, 20 s... then poll_interval.
    first_poll_seconds = 5.0
    billing_xcom_key = "azureml_billing"

    def __init__(
        self, azureml_conn_id: str = "azureml_default", job: AzureMLJobConfig | None = None
    ) -> None:
        self.azureml_conn_id = azureml_conn_id
        self.job = job
        self._states: dict[str, str] = {}  # job -> last status seen by astatus
        self._logs = LogRelay()
        self._async: Any = None

    def serialize(self) -> dict[str, Any]:
        return {"azureml_conn_id": self.azureml_conn_id}

    @cached_property
    def hook(self) -> Any:
        from airflow_stepop.hooks.azureml import AzureMLHook

        return AzureMLHook(azureml_conn_id=self.azureml_conn_id)

    @cached_property
    def arm(self) -> Any:
        from airflow_stepop.hooks.azureml_rest import ArmClient

        return ArmClient(self.hook)

    @property
    def workspace(self) -> Any:
        return self.hook.workspace

    def poll_group(self) -> str:
        """Azure ML throttles per subscription and workspace: one workspace, one group."""
        ws = self.workspace
        return f"azureml:{ws.subscription_id}:{ws.resource_group}:{ws.name}".lower()

    # ---- worker side -------------------------------------------------------------------

    def submit(self, request: JobRequest) -> dict[str, Any]:
        if self.job is None:
            raise RuntimeError("AzureMLBackend.submit needs a job configuration")
        from airflow_stepop.artifacts.storage import worker_storage

        storage = worker_storage(None)
        spec = read_staged_spec(storage, request)
        job = self.job
        if request.machine and not job.compute:  # a failover's next size (``machine_choices``)
            job = replace(job, instance_type=request.machine)
        job, compute_id, priority = named_cluster(self.arm, self.workspace, job)
        datastore = None
        found = parse_datastore(job.artifact_root or "")
        if found is not None:  # the job names the data as datastore paths, as Azure ML does
            store = self._datastore(found)
            datastore = (f"abfs://{store.container}", f"azureml://datastores/{found.name}/paths")
        entry = (Path(__file__).parent / "entry.py").read_bytes()
        inputs, outputs, launch, command, output_uri = build_launch(
            request, spec, storage_account(storage, request.run_uri), datastore,
            self.workspace.cloud.storage_suffix, entry_source=entry,
        )  # fmt: skip
        storage.write_bytes(join(request.run_uri, ENTRY_FILE), entry)
        storage.write_bytes(join(request.run_uri, LAUNCH_FILE), launch_bytes(launch))
        environment_id = self._environment(request, storage)
        tags = {f"airflow_{k}": str(v)[:256] for k, v in request.labels.items()}
        tags.update(job.tags)
        tags[TASK_TAG] = task_digest(request.task_key)
        properties = {"stepop_run_uri": request.run_uri, "stepop_output_uri": output_uri}
        if request.try_id:
            properties[TRY_PROPERTY] = request.try_id
        if job.instance_type:
            properties["stepop_vm_size"] = job.instance_type
        if priority:  # a named cluster's Dedicated or LowPriority VMs: the price to bill
            properties["stepop_vm_priority"] = priority
        if job.compute:  # its VM size is the cluster's: a quota failure has no size to change
            properties[CLUSTER_PROPERTY] = job.compute
        body = job_body(
            request, job, environment_id=environment_id, compute_id=compute_id, inputs=inputs,
            outputs=outputs, command=command, properties=properties, tags=tags,
        )  # fmt: skip
        path = f"{self.workspace.path}/jobs/{request.job_name}"
        # A PUT on a job of this name would replace that job's tags: another try's is left as
        # it is, this try's own (a submit retried after its answer was lost) is attached to.
        existing = self._existing(path)
        if existing is not None:
            owner = ((existing.get("properties") or {}).get("properties") or {}).get(TRY_PROPERTY)
            if not request.owns(owner):
                raise JobNameTakenError(request.job_name, owner)
            log.info("Azure ML job %s exists already; attaching to it", request.job_name)
            return self._handle(existing, request.task_key, job)
        try:
            answer = self.arm.put(path, body)  # a re-PUT of the same job answers the job itself
        except Exception as exc:
            if getattr(exc, "status_code", None) == 400:  # a VM size Azure ML lacks, say
                raise self._refusal(exc, job) from exc
            raise
        log.info("Azure ML job %s: %s, experiment %s", request.job_name, job.machine(),
                 job.experiment_name)  # fmt: skip
        return self._handle(answer, request.task_key, job)

    def machine_choices(self) -> tuple[MachineChoice, ...]:
        """The serverless VM size the step chose (named, resolved from ``resources``, or
        ``[stepop] azureml_default_instance_type``), then its ``fallback_types``; none on a named
        cluster, whose VM size is fixed (``config._fallback_sizes``)."""
        job = self.job
        if job is None or job.compute or not job.instance_type:
            return ()
        names = dict.fromkeys((job.instance_type, *job.fallback_types))  # each size once
        return tuple(
            MachineChoice(name, job_price_per_hour(name, job.instance_count, job.spot))
            for name in names
        )

    def _existing(self, path: str) -> dict[str, Any] | None:
        """The job at ``path``, or None when there is none."""
        try:
            return self.arm.get(path)
        except Exception as exc:
            if self.is_gone(exc):
                return None
            raise

    @staticmethod
    def _refusal(exc: Any, job: AzureMLJobConfig) -> Exception:
        known = {m.name for m in load_catalog(CATALOG).types}
        reason = getattr(exc, "message", None) or str(exc)
        return service_refusal("Azure ML", reason, "instance_type", job.instance_type, known)

    def artifact_root(self, root: str) -> str:
        """A datastore path -> ``abfs://<container>/<path>`` of the datastore (the worker writes
        there); a Blob Storage URL as it is."""
        found = parse_datastore(root)
        if found is None:
            return root
        return f"abfs://{self._datastore(found).container}/{found.path}".rstrip("/")

    def _datastore(self, found: DatastorePath) -> Datastore:
        from airflow_stepop.artifacts.storage import worker_storage

        store = resolve_datastore(found, self.workspace, self.arm, self.azureml_conn_id)
        check_account(store, storage_account(worker_storage(None), f"abfs://{store.container}"))
        return store

    def _handle(
        self, resource: dict[str, Any], task_key: str, job: AzureMLJobConfig | None
    ) -> dict[str, Any]:
        props = resource.get("properties", {})
        own = props.get("properties") or {}
        studio = ((props.get("services") or {}).get("Studio") or {}).get("endpoint")
        size = own.get("stepop_vm_size") or (props.get("resources") or {}).get("instanceType")
        count = int((props.get("resources") or {}).get("instanceCount") or 1)
        spot = low_priority(props)
        price = job_price_per_hour(size, count, spot) if size else None
        handle = {
            "job_id": resource["name"],
            "task_key": task_key,
            "run_uri": own.get("stepop_run_uri", ""),
            "output_uri": own.get("stepop_output_uri", ""),
            "experiment": props.get("experimentName"),
            "machine": job.machine() if job else f"{count} x {size}",
            "price_per_hour": price,
        }
        created = (resource.get("systemData") or {}).get("createdAt")
        if created:  # where the poller's newest-first list pages stop
            handle["create_time"] = created
        if studio:
            handle["studio_url"] = studio
        return handle

    def _environment(self, request: JobRequest, storage: Any) -> str:
        """The environment version the job runs in (an image, or a build context)."""
        from airflow_stepop.backends.azureml.image import environment_body

        name, version, body = environment_body(self, request, storage)
        path = f"{self.workspace.path}/environments/{name}/versions/{version}"
        self.arm.put(path, body)
        return path

    def find_active(self, task_key: str) -> dict[str, Any] | None:
        """A live job of the task instance, read from every page of the workspace's step jobs
        until found: the list filters by our tag's key only, so a wide mapped task's newer jobs
        can fill many pages of 100, and no creation time bounds how old a live job may be."""
        digest = task_digest(task_key)
        limiter = list_limiter(self.poll_group())
        path = f"{self.workspace.path}/jobs"
        for page in self.arm.pages(path, before=limiter.acquire, tag=TASK_TAG):
            for resource in page.get("value", []):
                props = resource.get("properties", {})
                if (props.get("tags") or {}).get(TASK_TAG) != digest:
                    continue
                if map_status(props.get("status", "")).terminal:
                    continue
                return self._handle(resource, task_key, None)
        return None

    def status(self, handle: dict[str, Any]) -> JobStatus:
        resource = self.arm.get(f"{self.workspace.path}/jobs/{handle['job_id']}")
        return map_status(resource["properties"]["status"])

    def environment_id(self, docker: DockerSettings | None) -> str:
        if self.job is not None and self.job.image_uri:  # keyed by its name: see the README
            return f"image:{self.job.image_uri}"
        return super().environment_id(docker)

    def job_record(self, job_id: str) -> JobRecord:
        """One GET of the job in this backend's workspace."""
        resource = self.arm.get(f"{self.workspace.path}/jobs/{job_id}")
        props = resource.get("properties", {})
        spec_sha256 = (props.get("environmentVariables") or {}).get(SPEC_SHA256_ENV)
        handle = self._handle(resource, task_key="", job=None)
        return JobRecord(map_status(props.get("status", "")), spec_sha256, handle)

    def stop(self, handle: dict[str, Any]) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        with contextlib.suppress(ResourceNotFoundError):  # never created: nothing to stop
            self.arm.post(f"{self.workspace.path}/jobs/{handle['job_id']}/cancel")

    def links(self, handle: dict[str, Any]) -> dict[str, str]:
        links = studio_links(self.workspace, handle["job_id"], handle.get("experiment"))
        if handle.get("studio_url") and self.workspace.emulated:
            links["logs"] = handle["studio_url"]  # the emulated cloud serves the job's log
        return links

    def is_transient(self, exc: Exception) -> bool:
        return is_transient_error(exc)

    def is_gone(self, exc: Exception) -> bool:
        from azure.core.exceptions import ResourceNotFoundError

        return isinstance(exc, ResourceNotFoundError)

    def billing(self, details: dict[str, Any]) -> dict[str, Any] | None:
        """Run seconds x instances x the catalog price (the low-priority price for Spot jobs and
        low-priority clusters)."""
        seconds = int(details.get("run_seconds") or 0)
        if not seconds or not details.get("instance_type"):
            return None
        spot = details.get("low_priority", details.get("job_tier") == "Spot")
        price = hourly_price(details["instance_type"], spot)
        return billing_record(
            job_name=details.get("job_name"),
            machine=details["instance_type"],
            count=int(details.get("instance_count") or 1),
            billable_seconds=seconds,
            spot=spot,
            price_per_hour=price,
            catalog_date=load_catalog(CATALOG).date,
        )
