"""VertexStepOperator's argument rules: keyword arguments -> a frozen ``VertexJobConfig``.

Checked at DAG parse time, before any API call: a wrong value fails the import naming the
argument, the value and a valid example. ``resources=`` is resolved here through the packaged
catalog (``catalog/vertex_custom_training.csv``) to the cheapest legal (machine type,
accelerator type, count); a catalog row names a machine with GPUs as
``MACHINE+ACCELERATOR_TYPExCOUNT`` (e.g. ``n1-standard-8+NVIDIA_TESLA_T4x1``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_stepop.backends import arguments as check
from airflow_stepop.setting_values import SettingsError

if TYPE_CHECKING:  # annotations only: a DAG without settings never builds one
    from airflow_stepop.catalog.resolver import Catalog
    from airflow_stepop.settings import DockerSettings, ResourceSettings

CATALOG = "vertex_custom_training"
DEFAULT_RUNTIME_S = 7 * 24 * 3600  # Vertex's own default scheduling.timeout
MAX_RUNTIME_S = 30 * 24 * 3600
MAX_REPLICAS = 100
ENV_ENTRIES_MAX = 96  # a container takes 100; four are ours (see vertex_job.build_job)
MAX_LABELS = 64  # Vertex's limit on a job's labels
# The labels every job of ours carries (vertex_job.job_labels): the poller's filter, re-attach,
# the try and the Airflow ids. A user label may not replace one.
OUR_LABELS = ("stepop", "stepop_task", "stepop_try")
AIRFLOW_LABEL_PREFIX = "airflow_"  # + dag_id, task_id, run_id, map_index
AIRFLOW_LABELS = ("dag_id", "task_id", "run_id", "map_index")
USER_LABELS_MAX = MAX_LABELS - len(OUR_LABELS) - len(AIRFLOW_LABELS)
ACCELERATORS = (
    "NVIDIA_TESLA_K80", "NVIDIA_TESLA_P100", "NVIDIA_TESLA_V100", "NVIDIA_TESLA_P4",
    "NVIDIA_TESLA_T4", "NVIDIA_TESLA_A100", "NVIDIA_A100_80GB", "NVIDIA_L4", "NVIDIA_H100_80GB",
    "NVIDIA_H100_MEGA_80GB", "NVIDIA_H200_141GB", "NVIDIA_B200", "NVIDIA_GB200",
    "NVIDIA_RTX_PRO_6000", "TPU_V2", "TPU_V3", "TPU_V4_POD", "TPU_V5_LITEPOD",
)  # fmt: skip
# How many of each GPU an n1 machine takes (Compute Engine's GPU platforms: T4, P4 and P100 in
# ones, twos and fours; V100 and K80 up to eight).
N1_GPU_COUNTS = {
    "NVIDIA_TESLA_T4": (1, 2, 4), "NVIDIA_TESLA_P4": (1, 2, 4), "NVIDIA_TESLA_P100": (1, 2, 4),
    "NVIDIA_TESLA_V100": (1, 2, 4, 8), "NVIDIA_TESLA_K80": (1, 2, 4, 8),
}  # fmt: skip
# Accelerator-optimized (GPU- or TPU-bundled) machine families and the accelerators they come
# with (Vertex AI "Configure compute resources for custom training"; the a4x, g4 and ct4p entries
# were not checked against a live project); their machine types take no other. A type of these
# families the catalog lists gets its accelerators filled in; one it does not list must name
# them. Every other accelerator attaches to n1 types (N1_GPU_COUNTS).
BUNDLED_FAMILIES = {
    "a2": ("NVIDIA_TESLA_A100", "NVIDIA_A100_80GB"),
    "a3": ("NVIDIA_H100_80GB", "NVIDIA_H100_MEGA_80GB", "NVIDIA_H200_141GB"),
    "a4": ("NVIDIA_B200",), "a4x": ("NVIDIA_GB200",),
    "g2": ("NVIDIA_L4",), "g4": ("NVIDIA_RTX_PRO_6000",),
    "cloud-tpu": ("TPU_V2", "TPU_V3"), "ct4p": ("TPU_V4_POD",), "ct5lp": ("TPU_V5_LITEPOD",),
}  # fmt: skip
_BUNDLED_COUNT = r"-(\d+)[gt]$"  # a3-megagpu-8g: 8 GPUs; ct5lp-hightpu-4t: 4 chips
_PROJECT = r"[a-z][a-z0-9-]{4,28}[a-z0-9]"
_LOCATION = r"[a-z]+(-[a-z]+)+\d+"
_MACHINE = r"[a-z][a-z0-9]*-[a-z0-9]+(-[a-z0-9]+)*"
_ACCOUNT = r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[a-z]{2,}"
_NETWORK = r"projects/[\w\-]+/global/networks/[\w\-]+"
_KMS = r"projects/[\w\-]+/locations/[\w\-]+/keyRings/[\w\-]+/cryptoKeys/[\w\-]+"
_LABEL_KEY = r"[a-z][a-z0-9_-]{0,62}"
_LABEL_VALUE = r"[a-z0-9_-]{0,63}"
_RESOURCE_ID = r"[a-z][a-z0-9-]{0,62}"
_EXPERIMENT = r"[a-z0-9][a-z0-9-]{0,63}"


@dataclass(frozen=True)
class VertexJobConfig:
    """A CustomJob's settings (what ``VertexBackend.submit`` turns into the request)."""

    machine_type: str
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

    @property
    def price_per_hour(self) -> float | None:
        """One machine's price, the spot price for spot jobs; None for a machine the catalog
        does not list. Read when the job is priced, not at parse."""
        row = _catalog().get(self.machine)
        return None if row is None else row.hourly_price(self.spot)

    @property
    def machine(self) -> str:
        """Catalog name of one machine: ``n1-standard-8+NVIDIA_TESLA_T4x1`` or ``e2-standard-4``."""
        return machine_name(self.machine_type, self.accelerator_type, self.accelerator_count)

    def describe(self) -> str:
        """``n1-standard-8 + 1 x NVIDIA_TESLA_T4, 2 replicas`` (the trigger's progress lines)."""
        text = self.machine_type
        if self.accelerator_type:
            text += f" + {self.accelerator_count} x {self.accelerator_type}"
        if self.replica_count > 1:
            text += f", {self.replica_count} replicas"
        return text + (", spot" if self.spot else "")

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
    ) -> VertexJobConfig:
        from airflow_stepop import config

        machine, accelerator, count = _hardware(
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
            _catalog().check_explicit(machine_name(machine, accelerator, count), resources,
                                   owner=owner, explicit="machine_type",
                                   written=written, wanted=resources_as)  # fmt: skip
        if machine is None:
            default = config.get("vertex_default_machine_type")
            machine, accelerator, count = split_machine(default)
            check.option("vertex_default_machine_type", machine, _MACHINE,
                         "a Vertex machine type", "n1-standard-4")  # fmt: skip
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
            experiment=experiment,
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


def machine_name(machine_type: str, accelerator_type: str | None, count: int) -> str:
    return f"{machine_type}+{accelerator_type}x{count}" if accelerator_type else machine_type


def split_machine(name: str) -> tuple[str, str | None, int]:
    """``n1-standard-8+NVIDIA_TESLA_T4x1`` -> ("n1-standard-8", "NVIDIA_TESLA_T4", 1)."""
    machine, _, accelerator = name.partition("+")
    if not accelerator:
        return machine, None, 0
    kind, _, count = accelerator.rpartition("x")
    return machine, kind, int(count)


def _catalog() -> Catalog:
    """The machine types with their accelerators and prices; read where a step names a machine
    or asks for hardware, and when a job is priced (no cost to a parse that does neither)."""
    from airflow_stepop.catalog import load

    return load(CATALOG)


def _hardware(
    owner: str,
    resources: ResourceSettings | None,
    machine_type: Any,
    accelerator_type: Any,
    accelerator_count: Any,
    *,
    resources_as: str,
) -> tuple[str | None, str | None, int]:
    """An explicit machine (checked against the catalog's pairings) wins over ``resources=``."""
    if accelerator_type is not None and accelerator_type not in ACCELERATORS:
        raise SettingsError(
            f"{owner}.accelerator_type={accelerator_type!r} is not a Vertex accelerator type; "
            "use e.g. 'NVIDIA_TESLA_T4', 'NVIDIA_L4' or 'NVIDIA_TESLA_A100'."
        )
    if accelerator_count is not None:
        check.whole_number(owner, "accelerator_count", accelerator_count, low=1, high=16)
    if accelerator_count is not None and accelerator_type is None and machine_type is None:
        raise _count_without_type(owner, accelerator_count)
    if machine_type is None:
        if accelerator_type is not None and resources is not None:
            raise SettingsError(
                f"{owner}.accelerator_type={accelerator_type!r} comes with machine_type= only: "
                f"{resources_as}= picks the machine and its GPUs. Drop accelerator_type= (a GPU "
                "model goes in ResourceSettings(gpu_type=...)), or give machine_type= too."
            )
        if accelerator_type is not None:
            raise SettingsError(
                f"{owner}.accelerator_type={accelerator_type!r} needs machine_type=, e.g. "
                "machine_type='n1-standard-8' (or ask with resources=ResourceSettings(...))."
            )
        if resources is None:
            return None, None, 0
        chosen = _catalog().resolve(resources, owner=f"{owner}.{resources_as}",
                                 explicit="machine_type", count="replica_count")  # fmt: skip
        return split_machine(chosen.name)
    check.refuse_template(owner, "machine_type", machine_type, "n1-standard-8")
    if not isinstance(machine_type, str) or not re.fullmatch(_MACHINE, machine_type):
        raise SettingsError(
            f"{owner}.machine_type={machine_type!r} is not a Vertex machine type; use e.g. "
            "'n1-standard-8', 'e2-standard-4' or 'a2-highgpu-1g'."
        )
    # Accelerator-optimized types come with their GPUs: the catalog knows which.
    fixed = [m.name for m in _catalog().types if m.name.startswith(machine_type + "+")]
    if fixed and not machine_type.startswith("n1-"):  # n1 rows: GPUs attached, not bundled
        (kind, count), *_ = {split_machine(name)[1:] for name in fixed}
        if (accelerator_type, accelerator_count) not in {(None, None), (kind, None), (kind, count)}:
            raise SettingsError(
                f"{owner}: machine_type={machine_type!r} comes with {count} x {kind}; leave "
                f"accelerator_type and accelerator_count out or set accelerator_type={kind!r}, "
                f"accelerator_count={count}."
            )
        return machine_type, kind, count
    family = bundled_family(machine_type)
    if family is not None:
        return _bundled(
            owner, machine_type, BUNDLED_FAMILIES[family], accelerator_type, accelerator_count
        )
    if accelerator_count is not None and accelerator_type is None:
        raise _count_without_type(owner, accelerator_count)
    if accelerator_type is None:
        return machine_type, None, 0  # not in the catalog: accepted as given, without a price
    if not machine_type.startswith("n1-") or accelerator_type not in N1_GPU_COUNTS:
        raise SettingsError(
            f"{owner}.accelerator_type={accelerator_type!r} cannot be attached to "
            f"machine_type={machine_type!r}. {_where_it_goes(accelerator_type)}"
        )
    count = accelerator_count or 1
    allowed = N1_GPU_COUNTS[accelerator_type]
    if count not in allowed:
        raise SettingsError(
            f"{owner}.accelerator_count={count} is not a count of {accelerator_type} an n1 "
            f"machine takes: use one of {', '.join(map(str, allowed))}."
        )
    return machine_type, accelerator_type, count


def _count_without_type(owner: str, count: Any) -> SettingsError:
    return SettingsError(
        f"{owner}.accelerator_count={count!r} needs accelerator_type=, e.g. "
        "accelerator_type='NVIDIA_TESLA_T4'."
    )


def bundled_family(machine_type: str) -> str | None:
    """'a3-megagpu-8g' -> 'a3', 'a4x-highgpu-4g' -> 'a4x', 'cloud-tpu' -> 'cloud-tpu',
    'n1-standard-8' -> None."""
    found = [f for f in BUNDLED_FAMILIES if f"{machine_type}-".startswith(f + "-")]
    return max(found, key=len) if found else None


def _bundled(
    owner: str,
    machine_type: str,
    kinds: tuple[str, ...],
    accelerator_type: Any,
    accelerator_count: Any,
) -> tuple[str, str, int]:
    """A type of an accelerator-optimized family the catalog does not list: as given, but
    Vertex needs its accelerators named (a machine spec without them is refused)."""
    suffix = re.search(_BUNDLED_COUNT, machine_type)
    count = accelerator_count or (int(suffix.group(1)) if suffix else None)
    example = (
        f"accelerator_type= one of {', '.join(repr(k) for k in kinds)} and "
        f"accelerator_count={count or 'N'} (what the machine type comes with)"
    )
    if accelerator_type is None:
        raise SettingsError(
            f"{owner}.machine_type={machine_type!r} is not in the catalog, so the accelerators "
            f"it comes with are not known, and Vertex needs them named: give {example}; or ask "
            "with resources=ResourceSettings(gpu_type=..., gpu_count=...) for a catalog type."
        )
    if accelerator_type not in kinds:
        raise SettingsError(
            f"{owner}.accelerator_type={accelerator_type!r} does not come with "
            f"machine_type={machine_type!r}: give {example}."
        )
    if count is None:
        raise SettingsError(
            f"{owner}.machine_type={machine_type!r} needs accelerator_count= (how many "
            f"{accelerator_type} it comes with), e.g. accelerator_count=8."
        )
    return machine_type, accelerator_type, count


def _where_it_goes(accelerator: str) -> str:
    """The fix for an accelerator on a machine type that cannot take it."""
    if accelerator in N1_GPU_COUNTS:
        return f"{accelerator} attaches to n1 types, e.g. machine_type='n1-standard-8'."
    families = [f for f, kinds in BUNDLED_FAMILIES.items() if accelerator in kinds]
    listed = [m.name.partition("+")[0] for m in _catalog().types if f"+{accelerator}x" in m.name]
    example = f", e.g. machine_type={listed[0]!r}" if listed else ""
    return (
        f"{accelerator} comes only with {'/'.join(families)} machine types{example}: name one "
        "(its accelerators are filled in when the catalog lists it)."
    )


__all__ = [
    "ACCELERATORS", "BUNDLED_FAMILIES", "MAX_LABELS", "OUR_LABELS", "VertexJobConfig",
    "access_arguments", "bundled_family", "machine_name", "split_machine",
]  # fmt: skip
