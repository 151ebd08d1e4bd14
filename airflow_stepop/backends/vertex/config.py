"""VertexStepOperator's argument rules: keyword arguments -> a frozen ``VertexJobConfig``.

Checked at DAG parse time, before any API call: a wrong value fails the import naming the
argument, the value and a valid example. ``resources=`` is resolved here, through the packaged
catalog, to the cheapest legal (machine type, accelerator type, count); ``machines``
holds which accelerators go with which machine. A step that asks for no machine gets
``[stepop] vertex_default_machine_type`` when it runs (``VertexJobConfig.completed``), read
with the worker's configuration as the other clouds read their defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_stepop.backends import arguments as check
from airflow_stepop.backends.vertex.flex_start import flex_start_machines, flex_start_wait
from airflow_stepop.backends.vertex.machines import (
    FALLBACK_EXAMPLE,
    MACHINE_CHOICE,
    catalog,
    default_machine,
    fallback_machine,
    hardware,
    machine_name,
    split_machine,
)
from airflow_stepop.setting_values import SettingsError

if TYPE_CHECKING:  # annotations only: a DAG without settings never builds one
    from airflow_stepop.settings import DockerSettings, ResourceSettings

DEFAULT_RUNTIME_S = 7 * 24 * 3600  # Vertex's own default scheduling.timeout
MAX_RUNTIME_S = 30 * 24 * 3600
MAX_REPLICAS = 100
ENV_ENTRIES_MAX = 96  # a container takes 100; four are ours (see job.build_job)
MAX_LABELS = 64  # Vertex's limit on a job's labels
# The labels every job of ours carries (job.job_labels): the poller's filter, re-attach,
# the try and the Airflow ids. A user label may not replace one.
OUR_LABELS = ("stepop", "stepop_task", "stepop_try")
AIRFLOW_LABEL_PREFIX = "airflow_"  # + dag_id, task_id, run_id, map_index
AIRFLOW_LABELS = ("dag_id", "task_id", "run_id", "map_index")
USER_LABELS_MAX = MAX_LABELS - len(OUR_LABELS) - len(AIRFLOW_LABELS)
_PROJECT = r"[a-z][a-z0-9-]{4,28}[a-z0-9]"
_LOCATION = r"[a-z]+(-[a-z]+)+\d+"
_ACCOUNT = r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[a-z]{2,}"
_NETWORK = r"projects/[\w\-]+/global/networks/[\w\-]+"
_KMS = r"projects/[\w\-]+/locations/[\w\-]+/keyRings/[\w\-]+/cryptoKeys/[\w\-]+"
_LABEL_KEY = r"[a-z][a-z0-9_-]{0,62}"
_LABEL_VALUE = r"[a-z0-9_-]{0,63}"
_RESOURCE_ID = r"[a-z][a-z0-9-]{0,62}"
_EXPERIMENT = r"[a-z0-9][a-z0-9-]{0,63}"


@dataclass(frozen=True)
class VertexJobConfig:
    """A CustomJob's settings (what ``VertexBackend.submit`` turns into the request).

    ``machine_type`` is None until ``completed()`` where the step asked for no machine."""

    machine_type: str | None = None
    accelerator_type: str | None = None
    accelerator_count: int = 0
    replica_count: int = 1
    boot_disk_size_gb: int = 100
    max_runtime_s: int = DEFAULT_RUNTIME_S
    spot: bool = False
    restart_on_worker_restart: bool = False
    service_account: str | None = None
    network: str | None = None
    encryption_key: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    image_uri: str | None = None
    image_repository: str | None = None
    persistent_resource_id: str | None = None
    experiment: str | None = None
    # the machines to fail over to, in order, when Vertex AI has no capacity or quota for the
    # one before: catalog names (``machine_name``), ``n1-standard-8+NVIDIA_TESLA_T4x1``
    fallback_types: tuple[str, ...] = ()
    # Dynamic Workload Scheduler: the job waits in Vertex AI's queue for its GPUs, at most
    # flex_start_max_wait_s (None: Vertex's default, a day; 0: without end)
    flex_start: bool = False
    flex_start_max_wait_s: int | None = None

    @property
    def price_per_hour(self) -> float | None:
        """One machine's price, the spot price for spot jobs; None for a machine the catalog
        does not list. Read when the job is priced, not at parse."""
        row = catalog().get(self.machine)
        return None if row is None else row.hourly_price(self.spot)

    @property
    def machine(self) -> str:
        """Catalog name of one machine: ``n1-standard-8+NVIDIA_TESLA_T4x1`` or ``e2-standard-4``."""
        return machine_name(self.machine_type, self.accelerator_type, self.accelerator_count)

    def on_machine(self, name: str) -> VertexJobConfig:
        """This job on another machine choice (a failover's, ``machine``'s form)."""
        machine, accelerator, count = split_machine(name)
        return replace(
            self, machine_type=machine, accelerator_type=accelerator, accelerator_count=count
        )

    def completed(
        self, owner: str, *, artifact_root: str, image_uri: str | None
    ) -> VertexJobConfig:
        """The job as it runs: the rendered image, and the default machine where the step
        named none (read now, with the worker's configuration); the root the task resolved
        must be one its job can read."""
        from airflow_stepop import config

        if not artifact_root.startswith("gs://"):
            raise SettingsError(
                f"{owner} needs a gs:// artifact root, but it is {artifact_root!r}: set "
                f"{config.artifact_root_options('vertex')} to e.g. 'gs://my-bucket/stepop'."
            )
        if self.machine_type is not None:
            return replace(self, image_uri=image_uri)
        machine, accelerator, count = default_machine(config.get("vertex_default_machine_type"))
        return replace(
            self,
            image_uri=image_uri,
            machine_type=machine,
            accelerator_type=accelerator,
            accelerator_count=count,
        )

    @classmethod
    def from_arguments(
        cls,
        owner: str,
        *,
        resources: ResourceSettings | None,
        docker: DockerSettings | None,
        artifact_root: str | None,
        execution_timeout: Any,
        resources_as: str = "resources",
        machine_type: str | None = None,
        accelerator_type: str | None = None,
        accelerator_count: int | None = None,
        replica_count: int = 1,
        boot_disk_size_gb: int = 100,
        max_runtime: timedelta | int | None = None,
        spot: bool = False,
        restart_on_worker_restart: bool = False,
        service_account: str | None = None,
        network: str | None = None,
        encryption_key: str | None = None,
        labels: Mapping[str, str] | None = None,
        image_uri: str | None = None,
        image_repository: str | None = None,
        persistent_resource_id: str | None = None,
        experiment: str | None = None,
        environment: Mapping[str, str] | None = None,
        fallback_types: tuple[str, ...] = (),
        flex_start: bool = False,
        flex_start_max_wait: timedelta | int | None = None,
    ) -> VertexJobConfig:
        machine, accelerator, count = hardware(
            owner,
            resources,
            machine_type,
            accelerator_type,
            accelerator_count,
            resources_as=resources_as,
        )
        if machine is not None and machine_type is not None:
            written = ", ".join(f"{key}={value!r}" for key, value in (
                ("machine_type", machine_type), ("accelerator_type", accelerator_type),
                ("accelerator_count", accelerator_count)) if value is not None)  # fmt: skip
            catalog().check_explicit(machine_name(machine, accelerator, count), resources,
                                   owner=owner, explicit="machine_type",
                                   written=written, wanted=resources_as)  # fmt: skip
        fallbacks = _fallback_machines(
            owner, fallback_types, chosen=machine and machine_name(machine, accelerator, count),
            named=machine_type is not None, resources=resources, resources_as=resources_as,
            persistent_resource_id=persistent_resource_id,
        )  # fmt: skip
        replicas = check.whole_number(
            owner, "replica_count", replica_count, low=1, high=MAX_REPLICAS
        )
        disk = check.whole_number(
            owner, "boot_disk_size_gb", boot_disk_size_gb, low=100, high=64000
        )
        if max_runtime is not None:
            runtime = check.seconds(owner, "max_runtime", max_runtime, low=1, high=MAX_RUNTIME_S,
                                    service="Vertex AI")  # fmt: skip
        else:  # the task's deadline plus a grace: the trigger, not Vertex, ends a late job
            runtime = check.runtime_limit(
                execution_timeout, high=MAX_RUNTIME_S, otherwise=DEFAULT_RUNTIME_S
            )
        check.boolean(owner, "spot", spot)
        check.boolean(owner, "restart_on_worker_restart", restart_on_worker_restart)
        max_wait = flex_start_wait(owner, flex_start, flex_start_max_wait, spot=spot,
                                   persistent_resource_id=persistent_resource_id,
                                   max_runtime_s=runtime)  # fmt: skip
        if flex_start:
            name, fallbacks = flex_start_machines(
                owner, machine and machine_name(machine, accelerator, count), fallbacks,
                named=machine_type is not None, listed=bool(fallback_types),
                resources=resources, resources_as=resources_as,
            )  # fmt: skip
            machine, accelerator, count = split_machine(name) if name else (None, None, 0)
        check.matching(owner, "service_account", service_account, _ACCOUNT, "a service account",
                       "trainer@my-project.iam.gserviceaccount.com")  # fmt: skip
        check.matching(owner, "network", network, _NETWORK, "a VPC network name",
                       "projects/123456789012/global/networks/my-vpc")  # fmt: skip
        kms_example = "projects/my-project/locations/us-central1/keyRings/ml/cryptoKeys/k"
        check.matching(owner, "encryption_key", encryption_key, _KMS, "a Cloud KMS key name",
                       kms_example)  # fmt: skip
        label_map = check.string_map(
            owner, "labels", labels, key_pattern=_LABEL_KEY, limit=USER_LABELS_MAX,
            limit_why=f" (Vertex takes {MAX_LABELS} labels per job, and "
                      f"{MAX_LABELS - USER_LABELS_MAX} are the step's own)",
            key_rule="keys are 1-63 lowercase letters, digits, '_' or '-', starting with a letter.",
            value_pattern=_LABEL_VALUE,
            value_rule="values are at most 63 lowercase letters, digits, '_' or '-'.",
        )  # fmt: skip
        _check_reserved_labels(owner, label_map)
        example = "us-central1-docker.pkg.dev/my-project/train/env:1.0"
        check.image(owner, image_uri, docker, image_repository, example)
        check.matching(owner, "persistent_resource_id", persistent_resource_id, _RESOURCE_ID,
                       "a persistent resource id", "stepop-warm-pool")  # fmt: skip
        check.matching(owner, "experiment", experiment, _EXPERIMENT,
                       "a Vertex AI experiment name", "churn-model")  # fmt: skip
        if experiment is not None and service_account is None:
            raise SettingsError(
                f"{owner}.experiment={experiment!r} needs service_account=: Vertex AI runs a job "
                "that logs to an experiment only as a service account of yours. Pass e.g. "
                "service_account='trainer@my-project.iam.gserviceaccount.com' (it needs "
                "roles/aiplatform.user), or leave experiment out."
            )
        check.artifact_root(owner, artifact_root, ("gs",), "gs://my-bucket/stepop")
        if environment and len(environment) > ENV_ENTRIES_MAX:
            raise SettingsError(
                f"{owner}.environment has {len(environment)} entries; a Vertex container takes "
                f"100 variables, {ENV_ENTRIES_MAX} of them the step's. Pass fewer (e.g. one JSON "
                "value)."
            )
        return cls(
            machine_type=machine, accelerator_type=accelerator, accelerator_count=count,
            replica_count=replicas, boot_disk_size_gb=disk, max_runtime_s=runtime, spot=spot,
            restart_on_worker_restart=restart_on_worker_restart, service_account=service_account,
            network=network, encryption_key=encryption_key, labels=label_map, image_uri=image_uri,
            image_repository=image_repository, persistent_resource_id=persistent_resource_id,
            experiment=experiment, fallback_types=fallbacks, flex_start=flex_start,
            flex_start_max_wait_s=max_wait,
        )  # fmt: skip


def _fallback_machines(
    owner: str,
    fallback_types: tuple[str, ...],
    *,
    chosen: str | None,
    named: bool,
    resources: ResourceSettings | None,
    resources_as: str,
    persistent_resource_id: str | None,
) -> tuple[str, ...]:
    """The machine choices a step fails over to (``arguments.fallback_machines``), as catalog
    names: each of ``fallback_types`` in the form ``fallback_machine`` reads, fitting
    ``resources``; else, for a machine chosen from ``resources``, the other fitting ones."""
    if persistent_resource_id is not None:  # its machines are provisioned already
        if fallback_types:
            raise SettingsError(
                f"{owner}.fallback_types={list(fallback_types)!r} with persistent_resource_id="
                f"{persistent_resource_id!r}: a job on a persistent resource runs on that "
                "resource's machines, which Vertex AI holds for it already (a job waits there "
                "for a free one), so there is no other type to fail over to. Drop "
                "fallback_types, or persistent_resource_id."
            )
        return ()
    if not fallback_types and (named or resources is None):
        return ()  # no catalog read for a step that neither names fallbacks nor asks for hardware
    names = []
    for index, value in enumerate(fallback_types):
        field = f"fallback_types[{index}]"
        name = fallback_machine(owner, field, value)
        try:
            catalog().check_explicit(name, resources, owner=owner, explicit="fallback_types",
                                     written=f"{field}={value!r}", wanted=resources_as)  # fmt: skip
        except SettingsError as exc:  # an n1 type's plain name is the machine without GPUs
            fitting = catalog().fitting(resources) if resources is not None else []
            with_gpus = [m.name for m in fitting if m.name.startswith(f"{name}+")]
            if not with_gpus:
                raise
            raise type(exc)(
                f"{exc} {value!r} is that machine without GPUs: with attached ones it is written "
                f"e.g. {with_gpus[0]!r}."
            ) from None
        names.append(name)
    return check.fallback_machines(
        owner, catalog, chosen=chosen, named=named, resources=resources,
        fallback_types=tuple(names), pattern=MACHINE_CHOICE, what="a Vertex machine type",
        example=FALLBACK_EXAMPLE, resources_as=resources_as,
    )  # fmt: skip


def _check_reserved_labels(owner: str, labels: Mapping[str, str]) -> None:
    for key in labels:
        if key in OUR_LABELS or key.startswith(AIRFLOW_LABEL_PREFIX):
            raise SettingsError(
                f"{owner}.labels has the key {key!r}, which is ours: every step's job carries "
                f"{', '.join(OUR_LABELS)} and {AIRFLOW_LABEL_PREFIX}* labels (finding and "
                f"re-attaching to its jobs depends on them). Rename it, e.g. 'my_{key}'."
            )


def access_arguments(
    owner: str, gcp_conn_id: Any, project_id: Any, location: Any, impersonation_chain: Any
) -> tuple[str, str | None, str | None, list[str]]:
    """The connection, project, region and impersonation chain, checked."""
    check.conn_id(owner, "gcp_conn_id", gcp_conn_id, "google_cloud_default")
    check.matching(owner, "project_id", project_id, _PROJECT, "a Google Cloud project id",
                   "my-project")  # fmt: skip
    check.matching(owner, "location", location, _LOCATION, "a Vertex AI region", "us-central1")
    if isinstance(impersonation_chain, str):
        impersonation_chain = [impersonation_chain]
    chain = check.id_list(owner, "impersonation_chain", impersonation_chain, _ACCOUNT,
                          "deployer@my-project.iam.gserviceaccount.com", limit=10,
                          service="the IAM credentials API")  # fmt: skip
    return gcp_conn_id, project_id, location, list(chain)


__all__ = [
    "AIRFLOW_LABEL_PREFIX", "MAX_LABELS", "OUR_LABELS", "VertexJobConfig", "access_arguments",
]  # fmt: skip
