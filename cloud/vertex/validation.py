"""What the Vertex AI fake refuses in a CustomJob, with the service's field paths and wording.

:func:`validate_custom_job` collects every problem of the body into one 400
``INVALID_ARGUMENT`` (``List of found errors: 1.Field: ...``) with a ``BadRequest`` detail, as
Vertex does; a malformed enum or duration is refused at once, as the JSON mapping does.
A FLEX_START job's own rules are in :mod:`cloud.vertex.flex_start`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from cloud.vertex.api import ApiError, enum_name, get_field
from cloud.vertex.catalog import check_machine
from cloud.vertex.flex_start import flex_start_problems

MAX_ENV_VARS = 100
REQUIRED = "Required field is not set."
_DURATION = re.compile(r"^-?\d+(\.\d{1,9})?s$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BOOT_DISK_TYPES = ("pd-ssd", "pd-standard", "hyperdisk-balanced")
CONTEXT_NAME = re.compile(
    r"projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/metadataStores/(?P<store>[^/]+)"
    r"/contexts/(?P<context>[^/]+)"
)


def _is_label_char(ch: str, first: bool) -> bool:
    if ch.isalpha():
        return ch == ch.lower()
    if first:
        return False
    return ch.isdigit() or ch in "_-"


def _label_problems(labels: Any, where: str) -> list[tuple[str, str]]:
    """Google's label rules: <= 64 labels; keys 1-63 chars starting with a lowercase letter;
    keys and values of lowercase letters, digits, '_' and '-'; values <= 63 chars."""
    if labels is None:
        return []
    if not isinstance(labels, dict):
        return [(where, "labels must be a map of string to string.")]
    problems: list[tuple[str, str]] = []
    if len(labels) > 64:
        problems.append((where, f"At most 64 labels are allowed, got {len(labels)}."))
    for key, value in labels.items():
        if not isinstance(value, str):
            problems.append((f"{where}[{key}]", "Label values must be strings."))
            continue
        if not key or len(key) > 63:
            problems.append(
                (f"{where}[{key}]", f"Label key '{key}' must be 1 to 63 characters long.")
            )
        elif not all(_is_label_char(c, i == 0) for i, c in enumerate(key)):
            problems.append(
                (
                    f"{where}[{key}]",
                    f"Label key '{key}' is invalid: keys must start with a lowercase letter and "
                    "contain only lowercase letters, numeric characters, underscores and dashes.",
                )
            )
        if len(value) > 63:
            problems.append(
                (f"{where}[{key}]", f"Label value '{value}' is longer than 63 characters.")
            )
        elif not all(_is_label_char(c, False) for c in value):
            problems.append(
                (
                    f"{where}[{key}]",
                    f"Label value '{value}' is invalid: values may contain only lowercase "
                    "letters, numeric characters, underscores and dashes.",
                )
            )
    return problems


def validate_custom_job(job: Any) -> dict[str, Any]:
    """Check a CustomJob as Vertex does; returns it with enums as names or raises ApiError."""
    if not isinstance(job, dict):
        raise ApiError(400, "Invalid JSON payload received. Expected a CustomJob object.")
    problems: list[tuple[str, str]] = []
    required = REQUIRED
    display = get_field(job, "displayName")
    if not display:
        problems.append(("custom_job.display_name", required))
    elif not isinstance(display, str) or len(display) > 128:
        problems.append(
            ("custom_job.display_name", "The display name must be at most 128 characters long.")
        )
    problems += _label_problems(get_field(job, "labels"), "custom_job.labels")
    spec = get_field(job, "jobSpec")
    if not spec:
        problems.append(("custom_job.job_spec", required))
        spec = {}
    pools = get_field(spec, "workerPoolSpecs") or []
    if not pools:
        problems.append(("custom_job.job_spec.worker_pool_specs", required))
    for i, pool in enumerate(pools):
        problems += _pool_problems(i, pool)
    sched = get_field(spec, "scheduling")
    if sched:
        if "strategy" in sched or "strategy" in {k.lower() for k in sched}:
            sched["strategy"] = enum_name(
                "Strategy", get_field(sched, "strategy"), "custom_job.job_spec.scheduling.strategy"
            )
        for key, snake in (("timeout", "timeout"), ("maxWaitDuration", "max_wait_duration")):
            val = get_field(sched, key)
            if val is not None and not (isinstance(val, str) and _DURATION.match(val)):
                raise ApiError(
                    400,
                    f"Invalid value at 'custom_job.job_spec.scheduling.{snake}' "
                    f"(type.googleapis.com/google.protobuf.Duration), {json.dumps(val)}",
                )
            if isinstance(val, str) and val.startswith("-"):
                problems.append(
                    (f"custom_job.job_spec.scheduling.{snake}", "Duration must be positive.")
                )
    problems += flex_start_problems(spec)
    base = get_field(spec, "baseOutputDirectory")
    if base is not None:
        prefix = get_field(base, "outputUriPrefix") or ""
        if not prefix.startswith("gs://") or len(prefix) <= len("gs://"):
            problems.append(
                (
                    "custom_job.job_spec.base_output_directory.output_uri_prefix",
                    f"Output uri prefix '{prefix}' must be a Cloud Storage path (gs://...).",
                )
            )
    account = get_field(spec, "serviceAccount")
    if account and "@" not in account:
        problems.append(
            ("custom_job.job_spec.service_account", f"Invalid service account '{account}'.")
        )
    problems += _experiment_problems(spec, account)
    if problems:
        listed = "".join(
            f"{n}.Field: {f}; Message: {m}\t" for n, (f, m) in enumerate(problems, start=1)
        )
        raise ApiError(
            400,
            f"List of found errors:\t{listed}",
            [
                {
                    "@type": "type.googleapis.com/google.rpc.BadRequest",
                    "fieldViolations": [{"field": f, "description": m} for f, m in problems],
                }
            ],
        )
    return job


def _experiment_problems(spec: dict[str, Any], account: Any) -> list[tuple[str, str]]:
    """Experiment and run: context names; a run needs its experiment; both need a service
    account (the Vertex SDK: "`service_account` is required with provided `experiment`")."""
    experiment = get_field(spec, "experiment")
    run = get_field(spec, "experimentRun")
    where = "custom_job.job_spec"
    problems: list[tuple[str, str]] = []
    for snake, value in (("experiment", experiment), ("experiment_run", run)):
        if value and not CONTEXT_NAME.fullmatch(value):
            problems.append(
                (
                    f"{where}.{snake}",
                    f"'{value}' is not a context name: use projects/{{project}}/locations/"
                    "{location}/metadataStores/{store}/contexts/{context}.",
                )
            )
    if run and not experiment:
        problems.append((f"{where}.experiment_run", "experiment_run requires experiment."))
    if experiment and not account:
        problems.append(
            (f"{where}.service_account", "A service account is required with an experiment.")
        )
    return problems


def _pool_problems(i: int, pool: Any) -> list[tuple[str, str]]:
    """One worker pool spec; stores its accelerator type by name (answered as asked)."""
    where = f"custom_job.job_spec.worker_pool_specs[{i}]"
    problems: list[tuple[str, str]] = []
    required = REQUIRED
    if not pool:
        if i == 0:
            problems.append((where, "The first worker pool spec must not be empty."))
        return problems
    machine = get_field(pool, "machineSpec") or {}
    mtype = get_field(machine, "machineType")
    acc_raw = get_field(machine, "acceleratorType", 0)
    acc = enum_name("AcceleratorType", acc_raw, f"{where}.machine_spec.accelerator_type")
    if isinstance(machine, dict) and ({"acceleratorType", "accelerator_type"} & set(machine)):
        machine.pop("accelerator_type", None)
        machine["acceleratorType"] = acc  # stored by name; answered as the client asks
    count = int(get_field(machine, "acceleratorCount", 0) or 0)
    if not mtype:
        problems.append((f"{where}.machine_spec.machine_type", required))
    else:
        msg = check_machine(mtype, acc, count)
        if msg:
            problems.append((f"{where}.machine_spec", msg))
    replicas_raw = get_field(pool, "replicaCount")
    replicas = int(replicas_raw) if replicas_raw not in (None, "") else 0
    if replicas < 1:
        problems.append((f"{where}.replica_count", "replica_count must be at least 1."))
    elif i == 0 and replicas != 1:
        problems.append(
            (f"{where}.replica_count", "The first worker pool must have exactly 1 replica.")
        )
    container = get_field(pool, "containerSpec")
    package = get_field(pool, "pythonPackageSpec")
    if container and package:
        problems.append((where, "Only one of container_spec and python_package_spec may be set."))
    elif not container and not package:
        problems.append((f"{where}.task", required))
    elif package:
        raise ApiError(501, "python_package_spec is not supported by the fake; use containerSpec.")
    else:
        if not get_field(container, "imageUri"):
            problems.append((f"{where}.container_spec.image_uri", required))
        envs = get_field(container, "env") or []
        if len(envs) > MAX_ENV_VARS:  # ContainerSpec.env: "Maximum limit is 100."
            problems.append(
                (
                    f"{where}.container_spec.env",
                    f"At most {MAX_ENV_VARS} environment variables are allowed, got {len(envs)}.",
                )
            )
        for j, env in enumerate(envs):
            name = get_field(env, "name")
            if not name:
                problems.append((f"{where}.container_spec.env[{j}].name", required))
            elif not _ENV_NAME.match(name):
                problems.append(
                    (f"{where}.container_spec.env[{j}].name", f"Invalid env name '{name}'.")
                )
    disk = get_field(pool, "diskSpec") or {}
    dtype = get_field(disk, "bootDiskType")
    if dtype and dtype not in _BOOT_DISK_TYPES:
        problems.append(
            (
                f"{where}.disk_spec.boot_disk_type",
                f"Boot disk type '{dtype}' is not supported. Use one of {list(_BOOT_DISK_TYPES)}.",
            )
        )
    dsize = get_field(disk, "bootDiskSizeGb")
    if dsize not in (None, 0, "0") and not 100 <= int(dsize) <= 64000:
        problems.append(
            (f"{where}.disk_spec.boot_disk_size_gb", "Boot disk size must be 100 to 64000 GB.")
        )
    return problems
