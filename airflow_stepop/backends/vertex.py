"""The Vertex AI backend: a step runs as a Vertex AI CustomJob.

How a step becomes a job (``build_job`` is pure, unit-tested):

* one worker pool (two for ``replica_count > 1``: Vertex's first pool has exactly one replica)
  runs ``python3 /gcs/<bucket>/<run>/stepop_vertex_entry.py`` (``vertex_entry.py``), which
  reads code, spec and inputs through the Cloud Storage FUSE mount and writes the results into
  the attempt's run directory: the image needs no Google SDK;
* ``baseOutputDirectory`` is the task instance's directory (the parent of every try's run
  directory), so ``AIP_CHECKPOINT_DIR`` - the step's ``$STEPOP_CHECKPOINT_DIR`` - is shared by
  all tries and survives a spot preemption;
* the display name is ``naming.job_name`` (one per try); labels ``stepop=step`` (every job of
  ours: the batched poll's filter), ``stepop_task`` (the task instance's hash: re-attach) and
  the Airflow ids, lowercased;
* triggerer side: async JobService REST client (``astatus``: GetCustomJob; ``astatuses``: one
  ListCustomJobs page per poll for many jobs), Cloud Logging ``entries:list`` at a bounded
  rate with a (timestamp, insertId) cursor, CancelCustomJob on kill and timeout.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import re
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow_stepop.backends.base import JobRequest, JobStatus, StepBackend
from airflow_stepop.backends.naming import key_prefix
from airflow_stepop.backends.ratelimit import list_limiter, log_limiter
from airflow_stepop.backends.vertex_api import ALIVE, GoogleAccess, is_transient_error, map_state
from airflow_stepop.backends.vertex_config import CATALOG, VertexJobConfig, machine_name
from airflow_stepop.runtime.storage import join

log = logging.getLogger(__name__)

ENTRY_FILE = "stepop_vertex_entry.py"
OUR_LABEL = ("stepop", "step")
ENV_MAX = 100
LOG_LOOKBACK_S = 10.0  # late log entries within this window of the newest one are not lost
FINAL_LOG_PAGES = 20
CREATE_ATTEMPTS = 6
CONSOLE = "https://console.cloud.google.com"
_LABEL_VALUE = re.compile(r"[^a-z0-9_-]+")


class VertexConfigError(ValueError):
    """A request Vertex would refuse, caught before any API call."""


def label_value(value: Any) -> str:
    return _LABEL_VALUE.sub("-", str(value).lower())[:63].strip("-") or "none"


def task_digest(task_key: str) -> str:
    return key_prefix(task_key).rsplit("-", 1)[1]


def gcs_path(uri: str) -> str:
    """gs://bucket/key -> /gcs/bucket/key (the Cloud Storage FUSE mount)."""
    if not uri.startswith("gs://"):
        raise VertexConfigError(
            f"A Vertex step reads and writes gs:// URIs only, not {uri}: give the step and its "
            "upstream steps a gs:// artifact_root, or pass the value itself."
        )
    return "/gcs/" + uri[len("gs://") :]


def _ref_uris(node: Any) -> list[str]:
    """URIs of every artifact reference in a spec value node."""
    if isinstance(node, dict):
        if isinstance(node.get("ref"), dict):
            return [node["ref"]["uri"]]
        children = [*node.get("list", []), *node.get("dict", {}).values()]
        return [uri for child in children for uri in _ref_uris(child)]
    return []


def job_labels(request: JobRequest, job: VertexJobConfig) -> dict[str, str]:
    ours = {f"airflow_{key}": label_value(value) for key, value in request.labels.items()}
    ours.update(dict([OUR_LABEL]), stepop_task=task_digest(request.task_key))
    ours["stepop_try"] = request.job_name.rsplit("-t", 1)[-1]
    return {**ours, **job.labels}


def build_job(
    request: JobRequest, spec: dict[str, Any], job: VertexJobConfig, image: str, project: str,
    location: str,
) -> dict[str, Any]:  # fmt: skip
    """The CustomJob body (proto field names) for one attempt. Pure: no API call."""
    run_uri = request.run_uri.rstrip("/")
    inputs = _ref_uris({"list": spec.get("args", [])}) + _ref_uris({"dict": spec.get("kwargs", {})})
    buckets = {
        uri.split("/", 3)[2] for uri in [run_uri, request.code_uri, *inputs] if gcs_path(uri)
    }
    path_map = {f"gs://{b}": f"/gcs/{b}" for b in sorted(buckets)}
    env = {
        **request.environment,
        "PYTHONUNBUFFERED": "1",
        "STEPOP_PATH_MAP": json.dumps(path_map),
        "STEPOP_SPEC_URI": request.spec_uri,
        "STEPOP_CODE_PATH": gcs_path(request.code_uri),
    }
    if len(env) > ENV_MAX:
        raise VertexConfigError(
            f"The step has {len(request.environment)} environment entries; a Vertex container "
            f"takes {ENV_MAX} in all, {ENV_MAX - 4} of them the step's. Pass fewer."
        )
    machine: dict[str, Any] = {"machine_type": job.machine_type}
    if job.accelerator_type:
        machine["accelerator_type"] = job.accelerator_type
        machine["accelerator_count"] = job.accelerator_count
    pool = {
        "machine_spec": machine,
        "replica_count": 1,
        "disk_spec": {"boot_disk_type": "pd-ssd", "boot_disk_size_gb": job.boot_disk_size_gb},
        "container_spec": {
            "image_uri": image,
            "command": ["python3", gcs_path(join(run_uri, ENTRY_FILE))],
            "env": [{"name": k, "value": v} for k, v in env.items()],
        },
    }
    pools = [pool]
    if job.replica_count > 1:
        pools.append({**pool, "replica_count": job.replica_count - 1})
    scheduling: dict[str, Any] = {
        "timeout": f"{job.max_runtime_s}s",
        "restart_job_on_worker_restart": job.restart_on_worker_restart,
    }
    if job.spot:
        scheduling["strategy"] = "SPOT"
    job_spec: dict[str, Any] = {
        "worker_pool_specs": pools,
        "scheduling": scheduling,
        "base_output_directory": {"output_uri_prefix": run_uri.rsplit("/", 1)[0]},
    }
    for name in ("service_account", "network", "persistent_resource_id"):
        if getattr(job, name):
            job_spec[name] = getattr(job, name)
    if job.experiment:
        contexts = f"projects/{project}/locations/{location}/metadataStores/default/contexts"
        job_spec["experiment"] = f"{contexts}/{job.experiment}"
        job_spec["experiment_run"] = f"{contexts}/{job.experiment}-{request.job_name}"
    body: dict[str, Any] = {
        "display_name": request.job_name,
        "labels": job_labels(request, job),
        "job_spec": job_spec,
    }
    if job.encryption_key:
        body["encryption_spec"] = {"kms_key_name": job.encryption_key}
    return body


def _rfc3339(value: Any) -> str | None:
    if not value:
        return None
    return value.rfc3339() if hasattr(value, "rfc3339") else value.isoformat()


def _epoch(text: str) -> float:
    """RFC 3339 with up to nanoseconds -> epoch seconds."""
    head, _, frac = text.rstrip("Z").partition(".")
    base = datetime.fromisoformat(head + "+00:00").timestamp()
    return base + (float(f"0.{frac}") if frac else 0.0)


def job_details(job: Any) -> dict[str, Any]:
    """The small JSON facts of a CustomJob that billing and the failure report read."""
    pools = list(job.job_spec.worker_pool_specs)
    machine = pools[0].machine_spec
    accelerator = machine.accelerator_type.name if machine.accelerator_count else None
    return {
        "job_name": job.display_name,
        "state": job.state.name,
        "machine_type": machine.machine_type,
        "accelerator_type": accelerator,
        "accelerator_count": int(machine.accelerator_count),
        "replica_count": sum(int(p.replica_count) for p in pools),
        "spot": job.job_spec.scheduling.strategy.name == "SPOT",
        "start_time": _rfc3339(job.start_time),
        "end_time": _rfc3339(job.end_time),
        "error": job.error.message or None,
    }


def billing(details: dict[str, Any]) -> dict[str, Any] | None:
    """(end - start) x replicas x the catalog's price (spot price for spot jobs)."""
    if not details.get("start_time") or not details.get("end_time"):
        return None
    from airflow_stepop.catalog import load

    catalog = load(CATALOG)
    name = machine_name(
        details["machine_type"], details.get("accelerator_type"), details["accelerator_count"]
    )
    row = catalog.get(name)
    price = (
        None
        if row is None
        else (row.spot_price_per_hour if details["spot"] else row.price_per_hour)
    )
    seconds = max(0.0, _epoch(details["end_time"]) - _epoch(details["start_time"]))
    replicas = int(details["replica_count"])
    billable = round(seconds * replicas, 3)
    return {
        "job_name": details["job_name"],
        "machine": name,
        "machine_type": details["machine_type"],
        "accelerator_type": details.get("accelerator_type"),
        "accelerator_count": details["accelerator_count"],
        "replica_count": replicas,
        "count": replicas,
        "billable_seconds": billable,
        "spot": details["spot"],
        "price_per_hour_usd": price,
        "estimated_cost_usd": None if price is None else round(price / 3600 * billable, 6),
        "catalog_date": catalog.date,
    }


def _docker_client() -> Any:
    try:
        import docker

        client = docker.from_env(timeout=120)
        client.ping()
        return client
    except Exception as exc:
        raise VertexConfigError(
            f"Building the step's environment image needs a container engine, and none answers "
            f"({exc}). Start one, or give a prebuilt image with image_uri=."
        ) from exc


class VertexBackend(StepBackend):
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
        self._final: set[str] = set()

    def serialize(self) -> dict[str, Any]:
        return {
            "gcp_conn_id": self.gcp_conn_id,
            "project_id": self.project_id,
            "location": self.location,
            "impersonation_chain": self.impersonation_chain,
        }

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

    def submit(self, request: JobRequest) -> dict[str, Any]:
        if self.job is None:
            raise RuntimeError("VertexBackend.submit needs a job configuration")
        from airflow_stepop.artifacts.storage import worker_storage

        storage = worker_storage(self.gcp_conn_id)
        spec = storage.read_json(request.spec_uri)
        image, built = self._image(request)
        access = self.access
        body = build_job(request, spec, self.job, image, access.project, access.region)
        storage.write_bytes(
            join(request.run_uri, ENTRY_FILE),
            (Path(__file__).parent / "vertex_entry.py").read_bytes(),
        )
        created = self._create(body)
        handle = self.handle_of(created, request.task_key)
        log.info("CustomJob %s (%s): %s, image %s", handle["job_id"], request.job_name,
                 handle["machine"], image)  # fmt: skip
        return {**handle, "image": image, "image_built": built}

    def _create(self, body: dict[str, Any]) -> Any:
        """CreateCustomJob, retried on throttling and 5xx; never twice for one display name."""
        for attempt in range(CREATE_ATTEMPTS):
            try:
                return self.access.jobs.create_custom_job(
                    parent=self.access.parent, custom_job=body
                )
            except Exception as exc:
                if not is_transient_error(exc) or attempt == CREATE_ATTEMPTS - 1:
                    raise
                if getattr(exc, "code", None) != 429:  # a lost answer may have created it
                    name = body["display_name"]
                    found = self._list(f'display_name="{name}"')
                    if found:
                        return found[0]
                delay = min(30.0, 0.5 * 2**attempt) * random.uniform(0.5, 1.0)
                log.warning("CreateCustomJob failed (%s); retrying in %.1fs", exc, delay)
                time.sleep(delay)
        raise AssertionError("unreachable")

    def handle_of(self, job: Any, task_key: str) -> dict[str, Any]:
        details = job_details(job)
        env = {e.name: e.value for e in job.job_spec.worker_pool_specs[0].container_spec.env}
        run_uri = env.get("STEPOP_SPEC_URI", "").rsplit("/", 1)[0]
        price = self.job.price_per_hour if self.job is not None else None
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
            "create_time": _rfc3339(job.create_time),
            "replicas": replicas,
            "machine": machine + (", spot" if details["spot"] else ""),
            "price_per_hour": None if price is None else round(price * replicas, 6),
            "project": job.name.split("/")[1],
            "location": job.name.split("/")[3],
            "experiment": self.job.experiment if self.job else None,
        }

    def _image(self, request: JobRequest) -> tuple[str, bool]:
        assert self.job is not None
        if self.job.image_uri:
            return self.job.image_uri, False
        if request.docker is None:
            raise VertexConfigError("Vertex steps need image_uri= or docker=DockerSettings")
        from airflow_stepop import config
        from airflow_stepop.images import builder, registry

        if not request.docker.needs_build:  # a parent image alone is used as it is
            return builder.image_reference(request.docker, builder.DEFAULT_REPOSITORY), False
        repository = (
            self.job.image_repository
            or config.get("vertex_image_repository")
            or f"{self.access.region}-docker.pkg.dev/{self.access.project}/airflow-stepop"
        )
        target = registry.prepare_google(repository, self.access.registry_password)
        options = builder.BuildOptions(
            network_mode=config.get("build_network_mode") or None,
            ca_bundle=config.get("build_ca_bundle") or None,
        )
        image, built = builder.ensure_image(
            request.docker, _docker_client(), repository=target.repository, push=True,
            options=options, auth_config=target.auth_config,
        )  # fmt: skip
        log.info("Environment image %s (%s)", image, "built and pushed" if built else "no build")
        return image, built

    def find_active(self, task_key: str) -> dict[str, Any] | None:
        jobs = self._list(f'labels.stepop_task="{task_digest(task_key)}"')
        for job in jobs:  # newest first
            if job.state.name in ALIVE:
                return self.handle_of(job, task_key)
        return None

    def status(self, handle: dict[str, Any]) -> JobStatus:
        """One GetCustomJob from the worker (a retry deciding to re-attach or reuse)."""
        return self._status(
            self.access.jobs.get_custom_job(name=handle["name"], retry=self._retry())
        )

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
                f"runs/{experiment}-{handle['display_name']}?project={project}"
            )
        return out

    def is_transient(self, exc: Exception) -> bool:
        return is_transient_error(exc)

    # ---- triggerer side ----------------------------------------------------------------

    def _status(self, job: Any) -> JobStatus:
        status = map_state(job.state.name, job.error.message or None)
        job_id = job.name.rsplit("/", 1)[1]
        self._state[job_id] = status.state
        if status.terminal:
            self._final.add(job_id)  # the next alogs call reads everything left
            status = replace(status, details=job_details(job))
        return status

    async def _aaccess(self) -> GoogleAccess:
        """The connection is read in a thread: never a blocking lookup on the event loop."""
        import asyncio

        access = self.access
        await asyncio.to_thread(lambda: (access.project, access.region, access.credentials))
        return access

    async def astatus(self, handle: dict[str, Any]) -> JobStatus:
        async with (await self._aaccess()).ajobs() as client:
            return self._status(await client.get_custom_job(name=handle["name"]))

    async def astatuses(self, handles: list[dict[str, Any]]) -> dict[str, JobStatus]:
        """One ListCustomJobs page (our label, created since the oldest watched job) per poll."""
        if not handles:
            return {}
        access = await self._aaccess()
        wanted = {h["job_id"] for h in handles}
        oldest = min(h.get("create_time") or "1970-01-01T00:00:00Z" for h in handles)
        request = {
            "parent": access.parent,
            "filter": f'labels.{OUR_LABEL[0]}="{OUR_LABEL[1]}" AND create_time>="{oldest}"',
            "page_size": 100,
        }
        out: dict[str, JobStatus] = {}
        async with access.ajobs() as client:
            for _ in range(5):  # jobs beyond five pages are described one by one by the poller
                await list_limiter(self.poll_group()).aacquire()
                page = await client.list_custom_jobs(request=request)
                for job in page.custom_jobs:
                    if job.name.rsplit("/", 1)[1] in wanted:
                        out[job.name.rsplit("/", 1)[1]] = self._status(job)
                if wanted <= set(out) or not page.next_page_token:
                    break
                request["page_token"] = page.next_page_token
        return out

    async def alogs(self, handle: dict[str, Any], cursor: Any) -> tuple[list[str], Any]:
        job_id = handle["job_id"]
        cursor = dict(cursor or {"ts": None, "seen": {}})
        final = job_id in self._final
        if not final and self._state.get(job_id) in (None, "pending"):
            return [], cursor  # no log call while the machines are being provisioned
        access = await self._aaccess()
        limiter = log_limiter(self.poll_group())
        query = f'resource.type="ml_job" AND resource.labels.job_id="{job_id}"'
        if cursor["ts"]:
            since = datetime.fromtimestamp(_epoch(cursor["ts"]) - LOG_LOOKBACK_S, tz=UTC)
            query += f' AND timestamp>="{since.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}"'
        body: dict[str, Any] = {
            "resourceNames": [f"projects/{handle.get('project') or access.project}"],
            "filter": query,
            "orderBy": "timestamp asc",
            "pageSize": 1000,
        }
        lines: list[str] = []
        seen: dict[str, float] = dict(cursor["seen"])
        newest = cursor["ts"]
        for _ in range(FINAL_LOG_PAGES if final else 1):
            if final:
                await limiter.aacquire()  # the last words: wait for a token, lose no line
            elif not limiter.try_acquire():
                break
            answer = await access.log_entries(body)
            for entry in answer.get("entries", []):
                if entry.get("insertId") in seen:
                    continue
                stamp = entry.get("timestamp") or newest or "1970-01-01T00:00:00Z"
                seen[entry.get("insertId", "")] = _epoch(stamp)
                newest = stamp if newest is None or _epoch(stamp) > _epoch(newest) else newest
                text = str(
                    entry.get("textPayload") or entry.get("jsonPayload", {}).get("message", "")
                )
                task = entry.get("resource", {}).get("labels", {}).get("task_name", "")
                lines.append(f"{task}: {text}" if handle.get("replicas", 1) > 1 and task else text)
            if not answer.get("nextPageToken"):
                break
            body["pageToken"] = answer["nextPageToken"]
        if newest:  # keep ids only inside the look-back window
            floor = _epoch(newest) - LOG_LOOKBACK_S
            seen = {key: stamp for key, stamp in seen.items() if stamp >= floor}
        return lines, {"ts": newest, "seen": seen}

    async def astop(self, handle: dict[str, Any]) -> None:
        from google.api_core import exceptions

        async with (await self._aaccess()).ajobs() as client:
            with contextlib.suppress(exceptions.FailedPrecondition, exceptions.BadRequest):
                await client.cancel_custom_job(name=handle["name"])  # refused when already ended


__all__ = ["VertexBackend", "VertexConfigError", "billing", "build_job", "job_details"]
