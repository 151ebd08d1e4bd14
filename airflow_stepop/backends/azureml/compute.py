"""A named Azure ML compute cluster, checked against the step before its job is submitted.

A cluster's VM size and priority are fixed when it is created; a step that asks for Spot VMs,
a GPU or an instance type the cluster cannot give is refused here, naming the cluster, instead
of running on what the cluster happens to have. Without ``compute`` a job runs serverless on the
size ``config`` chose.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from airflow_stepop.backends.azureml.config import CATALOG, AzureMLJobConfig
from airflow_stepop.backends.azureml.errors import AzureMLConfigError
from airflow_stepop.catalog import load as load_catalog


def named_cluster(
    arm: Any, workspace: Any, job: AzureMLJobConfig
) -> tuple[AzureMLJobConfig, str | None, str | None]:
    """A named cluster's id and VM priority, checked against the request before submitting."""
    if not job.compute:
        return job, None, None
    from azure.core.exceptions import ResourceNotFoundError

    compute_id = f"{workspace.path}/computes/{job.compute}"
    try:
        found = arm.get(compute_id)
    except ResourceNotFoundError:
        raise AzureMLConfigError(
            f"compute={job.compute!r} is not a compute of the workspace "
            f"{workspace.name!r}: name one of its clusters (az ml compute list), or "
            "leave compute unset to run serverless."
        ) from None
    cluster = found.get("properties", {}).get("properties") or {}
    size, priority = cluster.get("vmSize"), cluster.get("vmPriority")
    if job.spot and priority == "Dedicated":
        raise AzureMLConfigError(
            f"spot=True (job_tier='Spot') asks for low-priority VMs, but compute="
            f"{job.compute!r} is a cluster "
            "of Dedicated VMs (a cluster's VM priority is set when it is created; job tiers "
            "such as Spot are for serverless jobs); name a cluster created with LowPriority "
            "VMs, or leave compute unset to run serverless on Spot VMs."
        )
    if not size:
        return job, compute_id, priority
    if job.instance_type and job.instance_type.lower() != size.lower():
        raise AzureMLConfigError(
            f"compute={job.compute!r} runs {size} VMs, but instance_type="
            f"{job.instance_type!r} was asked for; drop instance_type or pick a cluster of "
            f"{job.instance_type}."
        )
    catalog = load_catalog(CATALOG)
    machine = catalog.get(size) or next(
        (m for m in catalog.types if m.name.lower() == size.lower()), None
    )
    wants_gpu = job.resources is not None and job.resources.gpu_count
    if machine is None and wants_gpu and catalog.named_without_gpu(size):
        raise AzureMLConfigError(
            f"compute={job.compute!r} runs {size} VMs, which have no GPU (only the N series "
            f"has), and {job.resources_as}={job.resources.shown()} asks for one; pick a GPU "
            "cluster, or leave compute unset to run serverless on the cheapest VM size that "
            "fits."
        )
    if job.resources is not None and machine is not None and not machine.fits(job.resources):
        raise AzureMLConfigError(
            f"compute={job.compute!r} runs {machine.describe()}, which does not fit "
            f"{job.resources_as}={job.resources.shown()}; pick a larger cluster, or leave "
            "compute unset to run serverless on the cheapest VM size that fits."
        )
    return replace(job, instance_type=machine.name if machine else size), compute_id, priority
