"""The CustomJob of one step: its request body, its labels, its facts and its cost.

Pure functions (no API call), so the request shape and the billing arithmetic are unit-tested.
How a step becomes a job:

* one worker pool (two for ``replica_count > 1``: Vertex's first pool has exactly one replica)
  runs the bootstrap (``backends/bootstrap.py``), which checks
  ``/gcs/<bucket>/<run>/stepop_vertex_entry.py`` (``entry.py``) and the code bundle against
  the digests in the job's command, then runs the entry script, which reads spec and inputs
  through the Cloud Storage FUSE mount and writes the results into the attempt's run
  directory: the image needs no Google SDK;
* ``baseOutputDirectory`` is the task instance's directory (the parent of every try's run
  directory), so ``AIP_CHECKPOINT_DIR`` - the step's ``$STEPOP_CHECKPOINT_DIR`` - is shared by
  all tries and survives a spot preemption;
* the display name is ``naming.job_name`` (one per try); labels ``stepop=step`` (every job of
  ours: the batched poll's filter), ``stepop_task`` (the task instance's hash: re-attach),
  ``stepop_try`` and the Airflow ids (``airflow_dag_id``, ``airflow_task_id``,
  ``airflow_run_id``, ``airflow_map_index``), lowercased, after the user's (whose keys may not
  be ours: refused at parse time).
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from airflow_stepop.backends.base import JobRequest, billing_record
from airflow_stepop.backends.bootstrap import (
    CheckedFile,
    bootstrap_arguments,
    bootstrap_environment,
    sha256_of,
)
from airflow_stepop.backends.naming import task_digest
from airflow_stepop.backends.vertex.config import (
    AIRFLOW_LABEL_PREFIX,
    MAX_LABELS,
    VertexJobConfig,
)
from airflow_stepop.backends.vertex.flex_start import scheduling_fields
from airflow_stepop.backends.vertex.machines import CATALOG, machine_name
from airflow_stepop.runtime.storage import join
from airflow_stepop.runtime.values import input_uris

ENTRY_FILE = "stepop_vertex_entry.py"
OUR_LABEL = ("stepop", "step")
ENV_MAX = 100
_LABEL_VALUE = re.compile(r"[^a-z0-9_-]+")


class VertexConfigError(ValueError):
    """A request Vertex would refuse, caught before any API call."""


def label_value(value: Any) -> str:
    return _LABEL_VALUE.sub("-", str(value).lower())[:63]


def gcs_path(uri: str) -> str:
    """gs://bucket/key -> /gcs/bucket/key (the Cloud Storage FUSE mount)."""
    if not uri.startswith("gs://"):
        raise VertexConfigError(
            f"A Vertex step reads and writes gs:// URIs only, not {uri}: give the step and its "
            "upstream steps a gs:// artifact_root, or pass the value itself."
        )
    return "/gcs/" + uri[len("gs://") :]


def job_labels(request: JobRequest, job: VertexJobConfig) -> dict[str, str]:
    """The user's labels, then ours (which the user's may not replace: config refuses
    their keys at parse time), at most Vertex's 64 in all."""
    ours = {
        f"{AIRFLOW_LABEL_PREFIX}{key}": label_value(value) for key, value in request.labels.items()
    }
    ours.update(dict([OUR_LABEL]), stepop_task=task_digest(request.task_key))
    ours["stepop_try"] = request.job_name.rsplit("-t", 1)[-1]
    labels = {**job.labels, **ours}
    if len(labels) > MAX_LABELS:
        raise VertexConfigError(
            f"The job would have {len(labels)} labels, {len(ours)} of them ours; Vertex takes "
            f"{MAX_LABELS}. Pass at most {MAX_LABELS - len(ours)} in labels=."
        )
    return labels


def command(request: JobRequest, entry_source: bytes) -> list[str]:
    """The container's command: the bootstrap, which checks the entry script and the code
    bundle (read through the FUSE mount, a live view of the bucket) against the digests it
    carries, then runs the entry script's checked copy."""
    checked = [
        CheckedFile(
            ENTRY_FILE, gcs_path(join(request.run_uri, ENTRY_FILE)), sha256_of(entry_source)
        ),
        CheckedFile("code.zip", gcs_path(request.code_uri), request.code_sha256),
    ]
    return ["python3", *bootstrap_arguments(checked, [ENTRY_FILE])]


def container_env(job: Any) -> dict[str, str]:
    """A CustomJob's container environment, as the service stores it with the job."""
    return {e.name: e.value for e in job.job_spec.worker_pool_specs[0].container_spec.env}


def build_job(
    request: JobRequest, spec: dict[str, Any], job: VertexJobConfig, image: str, project: str,
    location: str, entry_source: bytes,
) -> dict[str, Any]:  # fmt: skip
    """The CustomJob body (proto field names) for one attempt. Pure: no API call."""
    run_uri = request.run_uri.rstrip("/")
    inputs = input_uris(spec)
    buckets = {
        uri.split("/", 3)[2] for uri in [run_uri, request.code_uri, *inputs] if gcs_path(uri)
    }
    path_map = {f"gs://{b}": f"/gcs/{b}" for b in sorted(buckets)}
    env = {
        **request.environment,
        "PYTHONUNBUFFERED": "1",
        "STEPOP_PATH_MAP": json.dumps(path_map),
        "STEPOP_SPEC_URI": request.spec_uri,
        **bootstrap_environment(request.spec_sha256, request.try_id),
    }
    if len(env) > ENV_MAX:
        ours = len(env.keys() - request.environment.keys())
        raise VertexConfigError(
            f"The step has {len(request.environment)} environment entries; a Vertex container "
            f"takes {ENV_MAX} in all, {ENV_MAX - ours} of them the step's. Pass fewer."
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
            "command": command(request, entry_source),
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
    if job.flex_start:
        scheduling.update(scheduling_fields(job.flex_start_max_wait_s))
    job_spec: dict[str, Any] = {
        "worker_pool_specs": pools,
        "scheduling": scheduling,
        "base_output_directory": {"output_uri_prefix": run_uri.rsplit("/", 1)[0]},
    }
    for name in ("service_account", "network", "persistent_resource_id"):
        if getattr(job, name):
            job_spec[name] = getattr(job, name)
    if job.experiment:  # an existing Experiment; Vertex creates the job's ExperimentRun itself
        contexts = f"projects/{project}/locations/{location}/metadataStores/default/contexts"
        job_spec["experiment"] = f"{contexts}/{job.experiment}"
    body: dict[str, Any] = {
        "display_name": request.job_name,
        "labels": job_labels(request, job),
        "job_spec": job_spec,
    }
    if job.encryption_key:
        body["encryption_spec"] = {"kms_key_name": job.encryption_key}
    return body


def rfc3339(value: Any) -> str | None:
    if not value:
        return None
    return value.rfc3339() if hasattr(value, "rfc3339") else value.isoformat()


def epoch(text: str) -> float:
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
        "start_time": rfc3339(job.start_time),
        "end_time": rfc3339(job.end_time),
        "error": job.error.message or None,
    }


def hourly_price(details: dict[str, Any]) -> float | None:
    """One machine's price per hour of the job ``details`` describes, the machine that ran (a
    failover's, not the step's first choice); the Spot price for spot jobs."""
    from airflow_stepop.catalog import load

    name = machine_name(
        details["machine_type"], details.get("accelerator_type"), details["accelerator_count"]
    )
    row = load(CATALOG).get(name)
    return None if row is None else row.hourly_price(details["spot"])


def billing(details: dict[str, Any]) -> dict[str, Any] | None:
    """(end - start) per replica, x replicas x the catalog's price (spot price for spot jobs)."""
    if not details.get("start_time") or not details.get("end_time"):
        return None
    from airflow_stepop.catalog import load

    catalog = load(CATALOG)
    name = machine_name(
        details["machine_type"], details.get("accelerator_type"), details["accelerator_count"]
    )
    price = hourly_price(details)
    seconds = max(0.0, epoch(details["end_time"]) - epoch(details["start_time"]))
    replicas = int(details["replica_count"])
    return billing_record(
        job_name=details["job_name"],
        machine=name,
        count=replicas,
        billable_seconds=round(seconds, 3),
        spot=details["spot"],
        price_per_hour=price,
        catalog_date=catalog.date,
        machine_type=details["machine_type"],
        accelerator_type=details.get("accelerator_type"),
        accelerator_count=details["accelerator_count"],
        replica_count=replicas,
    )


__all__ = [
    "VertexConfigError", "billing", "build_job", "hourly_price", "job_details", "job_labels",
]  # fmt: skip
