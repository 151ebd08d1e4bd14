"""Azure ML step arguments -> a validated job configuration (at DAG parse time).

Every refusal names the argument, the value and a valid example (``SettingsError``). The VM
size comes from ``instance_type=`` or from ``resources=`` through the packaged catalog
(``backends/azureml/catalog.csv``, which also carries the low-priority price for Spot jobs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_stepop.backends import arguments as check
from airflow_stepop.backends.azureml.roots import check_root
from airflow_stepop.setting_values import SettingsError

if TYPE_CHECKING:  # annotations only: a DAG without settings never builds one
    from airflow_stepop.catalog.resolver import Catalog
    from airflow_stepop.settings import DockerSettings, ResourceSettings

CATALOG = "airflow_stepop.backends.azureml"
MAX_RUNTIME_LIMIT = 30 * 24 * 3600
DEFAULT_RUNTIME = 24 * 3600
JOB_TIERS = ("Spot", "Basic", "Standard", "Premium")
# queueSettings.priority as the azure-ai-ml SDK writes it on the wire (JobPriorityValues)
JOB_PRIORITIES = {"low": 1, "medium": 2, "high": 3}
_VM_SIZE = r"(?i)^Standard_[A-Za-z0-9_]+$"
_COMPUTE = r"^[A-Za-z][A-Za-z0-9-]{1,31}$"
_EXPERIMENT = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,254}$"
_GUID = r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$"
_SHM = r"^\d+[bkmgBKMG]$"
TASK_TAG = "stepop_task"  # every job of ours carries it: the List filter of polls and re-attach
AIRFLOW_TAG_PREFIX = "airflow_"  # every job's airflow_dag_id, airflow_task_id, ... tags
OWN_TAGS = (*(f"{AIRFLOW_TAG_PREFIX}{k}" for k in ("dag_id", "task_id", "run_id", "map_index")),
            TASK_TAG)  # fmt: skip
TAG_LIMIT = 50  # tags per Azure resource
_TAG_KEY = r"^[^<>%&\\?/]{1,256}$"
_TAG_VALUE = r"(?s)^.{0,256}$"


@dataclass(frozen=True)
class AzureMLJobConfig:
    """The command job's settings; ``None`` fields get their defaults at execute time."""

    compute: str | None = None
    instance_type: str | None = None
    instance_count: int = 1
    processes_per_instance: int = 1
    job_tier: str | None = None
    # the job's place in its compute's queue: "low", "medium" (Azure ML's default) or "high"
    job_priority: str | None = None
    max_runtime_s: int | None = None
    experiment_name: str | None = None
    identity: dict[str, str] | None = None
    tags: dict[str, str] = field(default_factory=dict)
    image_uri: str | None = None
    image_repository: str | None = None
    shm_size: str | None = None
    resources: ResourceSettings | None = None  # kept to check a named cluster's VM size
    resources_as: str = "resources"  # how the user wrote them, for that check's error
    artifact_root: str | None = None  # as configured (a datastore path is resolved at submit)
    # the serverless VM sizes to fail over to, in order, when Azure ML has no capacity or
    # quota for one (none with compute=: a cluster's VM size is fixed)
    fallback_types: tuple[str, ...] = ()

    @property
    def spot(self) -> bool:
        return self.job_tier == "Spot"

    @property
    def processes(self) -> int:
        return self.instance_count * self.processes_per_instance

    @classmethod
    def from_arguments(
        cls,
        owner: str,
        *,
        compute: Any = None,
        instance_type: Any = None,
        instance_count: Any = 1,
        processes_per_instance: Any = 1,
        job_tier: Any = None,
        job_priority: Any = None,
        spot: Any = False,
        max_runtime: Any = None,
        experiment_name: Any = None,
        identity: Any = None,
        tags: Any = None,
        image_uri: Any = None,
        image_repository: Any = None,
        shm_size: Any = None,
        resources: ResourceSettings | None = None,
        docker: DockerSettings | None = None,
        artifact_root: str | None = None,
        fallback_types: tuple[str, ...] = (),
        resources_as: str = "resources",
    ) -> AzureMLJobConfig:
        check.matching(owner, "compute", compute, _COMPUTE, "a compute cluster name", "gpu-cluster")
        size = _vm_size(owner, instance_type, resources, compute, resources_as)
        fallbacks = _fallback_sizes(
            owner, fallback_types, size, instance_type is not None, resources, compute,
            resources_as,
        )  # fmt: skip
        count = check.whole_number(owner, "instance_count", instance_count, low=1, high=100)
        per_node = check.whole_number(
            owner, "processes_per_instance", processes_per_instance, low=1, high=64
        )
        tier = _job_tier(owner, job_tier, check.boolean(owner, "spot", spot))
        if tier not in (None, "Spot") and compute is not None:
            raise SettingsError(
                f"{owner}.job_tier={job_tier!r} is a setting of serverless jobs, and "
                f"compute={compute!r} names a cluster, whose VMs are what it was created with. "
                "Leave job_tier out, or compute out to run serverless."
            )
        if job_priority is not None and job_priority not in JOB_PRIORITIES:
            raise SettingsError(
                f"{owner}.job_priority={job_priority!r} is not an Azure ML job priority; use one "
                f"of {', '.join(map(repr, JOB_PRIORITIES))} (Azure ML's default is 'medium')."
            )
        runtime = None
        if max_runtime is not None:
            runtime = check.seconds(
                owner, "max_runtime", max_runtime, low=1, high=MAX_RUNTIME_LIMIT, service="Azure ML"
            )
        check.matching(
            owner, "experiment_name", experiment_name, _EXPERIMENT,
            "an experiment name (up to 255 letters, digits, '_' or '-', not starting with '_' or "
            "'-')", "nightly_training",
        )  # fmt: skip
        tag_map = check.string_map(
            owner, "tags", tags, key_pattern=_TAG_KEY,
            key_rule="keys are 1-256 characters without < > % & \\ ? /.",
            value_pattern=_TAG_VALUE, value_rule="values are strings of at most 256 characters.",
            limit=TAG_LIMIT - len(OWN_TAGS),
            limit_why=f" (Azure takes {TAG_LIMIT} tags per resource, and {len(OWN_TAGS)} are "
            "the step's own)",
        )  # fmt: skip
        _check_reserved_tags(owner, tag_map)
        check.image(owner, image_uri, docker, image_repository, "myregistry.azurecr.io/train:1.0")
        check.refuse_template(owner, "shm_size", shm_size, "16g")
        if shm_size is not None and (not isinstance(shm_size, str) or not re.match(_SHM, shm_size)):
            raise SettingsError(
                f"{owner}.shm_size={shm_size!r} is not a size; use a number and a unit of "
                "b, k, m or g, e.g. '16g'."
            )
        check_root(owner, artifact_root)
        return cls(
            compute=compute,
            instance_type=size,
            instance_count=count,
            processes_per_instance=per_node,
            job_tier=tier,
            job_priority=job_priority,
            max_runtime_s=runtime,
            experiment_name=experiment_name,
            identity=_identity(owner, identity),
            tags=tag_map,
            image_uri=image_uri,
            image_repository=image_repository,
            shm_size=shm_size,
            resources=resources,
            resources_as=resources_as,
            fallback_types=fallbacks,
        )

    def completed(
        self,
        owner: str,
        *,
        dag_id: str,
        execution_timeout: timedelta | None,
        artifact_root: str,
        image_uri: str | None,
    ) -> AzureMLJobConfig:
        """The job as it runs: the root the task resolved, the rendered image, and the defaults
        that depend on the task or on [stepop] options (read now, with the worker's
        configuration)."""
        from airflow_stepop import config

        if self.artifact_root:
            field = "artifact_root"
        elif config.get("azureml_artifact_root"):
            field = "[stepop] azureml_artifact_root"
        else:
            field = "[stepop] artifact_root"
        check_root(owner, artifact_root, field)
        runtime = self.max_runtime_s or check.runtime_limit(
            execution_timeout, high=MAX_RUNTIME_LIMIT, otherwise=DEFAULT_RUNTIME
        )
        instance_type = self.instance_type
        if not (instance_type or self.compute):
            instance_type = check.option(
                "azureml_default_instance_type", config.get("azureml_default_instance_type"),
                _VM_SIZE, "an Azure VM size", "Standard_DS3_v2",
            )  # fmt: skip
        repository = self.image_repository or config.get("azureml_image_repository") or None
        return replace(
            self,
            artifact_root=artifact_root,
            image_uri=image_uri,
            image_repository=repository,
            instance_type=instance_type,
            max_runtime_s=runtime,
            experiment_name=self.experiment_name or experiment_for(dag_id),
        )

    def machine(self) -> str:
        what = self.instance_type or "cluster VM"
        where = f" on {self.compute}" if self.compute else ""
        parts = f"{self.instance_count} x {what}{where}"
        if self.processes_per_instance > 1:
            parts += f", {self.processes_per_instance} processes each"
        return parts + (" (Spot)" if self.spot else "")


def experiment_for(dag_id: str) -> str:
    """A valid experiment name from a DAG id (dots and other characters become '_')."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", dag_id).lstrip("_-") or "airflow"
    return name[:255]


def _vm_size(
    owner: str, value: Any, resources: ResourceSettings | None, compute: Any, resources_as: str
) -> str | None:
    if value is not None:
        check.refuse_template(owner, "instance_type", value, "Standard_NC6s_v3")
        catalog = _catalog()
        if not isinstance(value, str) or not re.match(_VM_SIZE, value):
            near = ", ".join(m.name for m in catalog.types[:3])
            raise SettingsError(
                f"{owner}.instance_type={value!r} is not an Azure VM size; use e.g. {near}."
            )
        known = {m.name.lower(): m.name for m in catalog.types}
        size = known.get(value.lower(), value)
        catalog.check_explicit(
            size, resources, owner=owner, explicit="instance_type", wanted=resources_as
        )
        return size
    if resources is not None and compute is None:  # a named cluster's size is checked at submit
        return _catalog().resolve(resources, owner=f"{owner}.{resources_as}").name
    return None


def _fallback_sizes(
    owner: str,
    fallback_types: tuple[str, ...],
    size: str | None,
    named: bool,
    resources: ResourceSettings | None,
    compute: Any,
    resources_as: str,
) -> tuple[str, ...]:
    """The serverless VM sizes a step fails over to (``arguments.fallback_machines``): none
    on a named cluster, whose VM size was fixed when it was created (nothing to change)."""
    if compute is not None:
        if fallback_types:
            raise SettingsError(
                f"{owner}.fallback_types={list(fallback_types)!r} and compute={compute!r}: a "
                "cluster's VM size is fixed when it is created, so a job on it has no other size "
                "to fail over to. Leave compute out to run serverless (then the sizes listed are "
                "tried in turn), or leave fallback_types out."
            )
        return ()
    if not fallback_types and (named or resources is None):
        return ()  # a size you chose (or the default) is never swapped behind your back
    catalog = _catalog()
    known = {m.name.lower(): m.name for m in catalog.types}
    # Azure VM sizes ignore case: the catalog's spelling, so that a repeat is seen as one
    sizes = tuple(known.get(n.lower(), n) if isinstance(n, str) else n for n in fallback_types)
    return check.fallback_machines(
        owner, lambda: catalog, chosen=size, named=named, resources=resources, fallback_types=sizes,
        pattern=_VM_SIZE, what="an Azure VM size", example="Standard_NC8as_T4_v3",
        resources_as=resources_as,
    )  # fmt: skip


def _catalog() -> Catalog:
    """The VM sizes with their hardware and prices; read where a step names a size or asks
    for hardware (its module and dataclasses are no cost to a parse that does neither)."""
    from airflow_stepop.catalog import load

    return load(CATALOG)


def _job_tier(owner: str, job_tier: Any, spot: bool) -> str | None:
    if job_tier is not None and job_tier not in JOB_TIERS:
        raise SettingsError(
            f"{owner}.job_tier={job_tier!r} is not an Azure ML job tier; use one of "
            f"{', '.join(JOB_TIERS)} (e.g. 'Spot' for low-priority VMs)."
        )
    if spot and job_tier not in (None, "Spot"):
        raise SettingsError(
            f"{owner}: spot=True and job_tier={job_tier!r} disagree; spot=True is job_tier='Spot'."
        )
    return "Spot" if spot else job_tier


def _identity(owner: str, value: Any) -> dict[str, str] | None:
    """None (the compute's default), 'user', 'managed', 'managed:<client id>' or 'aml_token'."""
    if value is None:
        return None
    if value == "user":
        return {"identityType": "UserIdentity"}
    if value == "aml_token":
        return {"identityType": "AMLToken"}
    if value == "managed":
        return {"identityType": "Managed"}
    if isinstance(value, str) and value.startswith("managed:") and re.match(_GUID, value[8:]):
        return {"identityType": "Managed", "clientId": value[8:]}
    raise SettingsError(
        f"{owner}.identity={value!r} is not an identity; use 'user' (the submitting user's), "
        "'managed' (the compute's), 'managed:<client id>' (a user-assigned identity) or "
        "'aml_token'."
    )


def job_price_per_hour(instance_type: str, count: int, spot: bool) -> float | None:
    """USD per hour for the whole job (all instances; the low-priority price for Spot)."""
    price = hourly_price(instance_type, spot)
    return None if price is None else round(price * count, 6)


def hourly_price(instance_type: str, spot: bool) -> float | None:
    """USD per instance-hour from the catalog (see ``MachineType.hourly_price``); None when the
    catalog does not list the size."""
    machine = _catalog().get(instance_type)
    return None if machine is None else machine.hourly_price(spot)


def _check_reserved_tags(owner: str, tags: dict[str, str]) -> None:
    """A user's tag of one of our keys would silently replace ours, which names the task."""
    for key in tags:
        folded = key.lower()  # Azure tag names ignore case
        if folded == TASK_TAG or folded.startswith(AIRFLOW_TAG_PREFIX):
            raise SettingsError(
                f"{owner}.tags has the key {key!r}, which is ours (in any case): every job "
                f"carries {', '.join(OWN_TAGS)} (polling and re-attach find jobs by "
                f"{TASK_TAG}). Rename it, e.g. 'my_{key}'."
            )
