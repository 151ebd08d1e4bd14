"""A Vertex AI CustomJob fake that speaks REST v1 and really runs the job.

Start it::

    python -m cloud.vertex --port 8091 --gcs-emulator-host 127.0.0.1:9023 [--mode process]

or in-process: ``server = cloud.vertex.serve("127.0.0.1", 0, gcs_emulator_host=...)``;
``server.url`` is the endpoint and ``server.shutdown()`` stops it and every job it runs.

Point the official client at it (no credentials needed; the fake checks none)::

    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform_v1

    client = aiplatform_v1.JobServiceClient(
        transport="rest",
        client_options=ClientOptions(api_endpoint=server.url),  # "http://127.0.0.1:8091"
        credentials=AnonymousCredentials(),
    )

The async client works with ``transport="rest_asyncio"`` and
``google.auth.aio.credentials.AnonymousCredentials()`` (needs aiohttp, installed here).

What it serves (``{p}``/``{l}`` are free-form; the fake keeps jobs per project/location):

``POST   /v1/projects/{p}/locations/{l}/customJobs``          CreateCustomJob
``GET    /v1/projects/{p}/locations/{l}/customJobs``          ListCustomJobs (filter, pageSize,
                                                              pageToken; newest first)
``GET    /v1/projects/{p}/locations/{l}/customJobs/{id}``     GetCustomJob
``POST   /v1/projects/{p}/locations/{l}/customJobs/{id}:cancel``  CancelCustomJob
``DELETE /v1/projects/{p}/locations/{l}/customJobs/{id}``     DeleteCustomJob (a done LRO)
``POST   /v2/entries:list``                                   Cloud Logging ``entries:list``
``GET    /_fake/logs/{id}[?task=workerpool0-0]``               the job's log as plain text
plus the control API of :mod:`cloud.fake_http` (``/_fake/faults``, ``/_fake/counters``...).

Enums are answered as numbers when the client asks for ``$alt=json;enum-encoding=int`` (the
python client always does) and as names otherwise; both are accepted on input.

How a job runs (see :mod:`cloud.runner`): QUEUED -> PENDING -> RUNNING -> SUCCEEDED/FAILED, or
CANCELLING -> CANCELLED. Each worker pool's ``containerSpec`` starts one node per replica
(``replicaCount``) with ``CLUSTER_SPEC``/``TF_CONFIG``, ``MASTER_ADDR``/``MASTER_PORT``/
``WORLD_SIZE``/``RANK``, ``CLOUD_ML_JOB_ID``/``CLOUD_ML_PROJECT_ID``/``CLOUD_ML_REGION`` and, when
``baseOutputDirectory`` is set, ``AIP_MODEL_DIR``/``AIP_CHECKPOINT_DIR``/
``AIP_TENSORBOARD_LOG_DIR`` (``<base>/model/``, ``<base>/checkpoints/``, ``<base>/logs/``, as
gs:// URIs like the real service). All nodes share one host, so cluster addresses are
``127.0.0.1:<distinct port>`` instead of Vertex's per-VM ``host:2222``.
``/gcs/<bucket>`` is a copy, not a FUSE mount (see :mod:`cloud.vertex_gcs`): buckets named
in the spec are downloaded before the start and changes uploaded after the exit. In process
mode ``/gcs/...`` is re-rooted only where it appears in command, args or env values.

Logs: real Vertex writes them to Cloud Logging (resource type ``ml_job``, log
``projects/{p}/logs/workerpool0-0``, stderr at severity ERROR). The fake serves the same
entries from ``POST /v2/entries:list`` (filter on ``resource.labels.job_id``,
``resource.labels.task_name``, ``timestamp>``/``>=``; ``pageSize``/``pageToken``) and as
plain text from ``GET /_fake/logs/{id}``.

Failures: a non-zero exit gives JOB_STATE_FAILED with ``error`` ``{"code": 3, "message":
"The replica workerpool0-0 exited with a non-zero status of N. ..."}``, a cancel gives
JOB_STATE_CANCELLED with ``{"code": 1, "message": "CANCELED"}``, ``scheduling.timeout`` gives
``{"code": 4, ...}``. Fault kinds (``/_fake/faults``): ``throttle`` (429 RESOURCE_EXHAUSTED),
``error`` (5xx), ``provisioning_delay``, ``job_failure`` (``reason``, ``code``; default 8
RESOURCE_EXHAUSTED, the stockout shape; ``state`` JOB_STATE_FAILED (default), JOB_STATE_EXPIRED,
or JOB_STATE_PAUSED, where the job then stays until cancelled), ``preempt`` (a SPOT job is
restarted from scratch while ``scheduling.disableRetries`` is false - resume from
AIP_CHECKPOINT_DIR -; otherwise it fails with code 14 UNAVAILABLE), ``log_delay``.

Settings (``serve(**settings)`` / command line / env):

``gcs_emulator_host``  ``host:port`` of gcp-storage-emulator (env ``STORAGE_EMULATOR_HOST``);
                       without it /gcs is an empty scratch directory and nothing is synced.
``mode``               ``process`` (default) or ``container`` (env ``STEPOP_FAKE_MODE``); a job
                       labelled ``stepop_fake_mode: container|process`` overrides it.
``queue_seconds``, ``provision_seconds``  time spent QUEUED and PENDING (0.05 s each).
``tmp_base``           where per-job directories go (default: the system temp dir).
``keep_workdirs``      keep per-job directories after the end (debugging).

Integration notes for cloud-up
------------------------------
* Registered in ``cloud.stack.FAKES`` (``STEPOP_VERTEX_ENDPOINT``); ``serve(host, port, env)``
  follows the ``cloud.serve`` contract (blocks; reads ``STORAGE_EMULATOR_HOST``,
  ``STEPOP_CLOUD_DIR`` -> job roots under ``.cloud/jobs/vertex`` where ``stack down`` finds
  leftover job PIDs, ``STEPOP_FAKE_MODE``). ``stack_env`` adds
  ``STEPOP_VERTEX_LOGGING_ENDPOINT`` (the same server, Cloud Logging ``/v2/entries:list``).
  Checked with ``STEPOP_CLOUD_DIR=/tmp/x python -m cloud.stack up``.
* The control API lives in :mod:`cloud.fake_http` (shared with the SageMaker and Azure ML
  fakes; ``cloud.control.FakeControl`` is its client). Keep its ``FakeServer(service, host,
  port)`` / ``FakeService`` / ``Request`` / ``Response`` names stable: all three fakes use them.
* docs/testing.md (part A) may quote this docstring for what the fake covers and what not:
  /gcs is a copy synced at start and end; python_package_spec, persistent resources,
  tensorboard, PSC/network, hyperparameter tuning and pipelines are not emulated.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import secrets
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from cloud import runner as runner_mod
from cloud.fake_http import FakeServer, FakeService, Request, Response, rfc3339
from cloud.vertex_catalog import check_machine
from cloud.vertex_gcs import referenced_buckets, storage_client, sync_down, sync_up

MAX_ENV_VARS = 100

# google.rpc.Code numbers used in CustomJob.error
CODE_CANCELLED = 1
CODE_INVALID_ARGUMENT = 3
CODE_DEADLINE_EXCEEDED = 4
CODE_RESOURCE_EXHAUSTED = 8
CODE_INTERNAL = 13
CODE_UNAVAILABLE = 14

_HTTP_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "ALREADY_EXISTS",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

ENUMS: dict[str, dict[str, int]] = {
    "JobState": {
        "JOB_STATE_UNSPECIFIED": 0,
        "JOB_STATE_QUEUED": 1,
        "JOB_STATE_PENDING": 2,
        "JOB_STATE_RUNNING": 3,
        "JOB_STATE_SUCCEEDED": 4,
        "JOB_STATE_FAILED": 5,
        "JOB_STATE_CANCELLING": 6,
        "JOB_STATE_CANCELLED": 7,
        "JOB_STATE_PAUSED": 8,
        "JOB_STATE_EXPIRED": 9,
        "JOB_STATE_UPDATING": 10,
        "JOB_STATE_PARTIALLY_SUCCEEDED": 11,
    },
    "Strategy": {
        "STRATEGY_UNSPECIFIED": 0,
        "ON_DEMAND": 1,
        "LOW_COST": 2,
        "STANDARD": 3,
        "SPOT": 4,
        "FLEX_START": 6,
    },
    "AcceleratorType": {
        "ACCELERATOR_TYPE_UNSPECIFIED": 0,
        "NVIDIA_TESLA_K80": 1,
        "NVIDIA_TESLA_P100": 2,
        "NVIDIA_TESLA_V100": 3,
        "NVIDIA_TESLA_P4": 4,
        "NVIDIA_TESLA_T4": 5,
        "TPU_V2": 6,
        "TPU_V3": 7,
        "NVIDIA_TESLA_A100": 8,
        "NVIDIA_A100_80GB": 9,
        "TPU_V4_POD": 10,
        "NVIDIA_L4": 11,
        "TPU_V5_LITEPOD": 12,
        "NVIDIA_H100_80GB": 13,
        "NVIDIA_H100_MEGA_80GB": 14,
        "NVIDIA_H200_141GB": 15,
        "NVIDIA_B200": 16,
        "NVIDIA_GB200": 17,
        "NVIDIA_RTX_PRO_6000": 18,
    },
}
_ENUM_TYPE_URL = {
    "Strategy": "google.cloud.aiplatform.v1.Scheduling.Strategy",
    "AcceleratorType": "google.cloud.aiplatform.v1.AcceleratorType",
}
TERMINAL = {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED"}
_DURATION = re.compile(r"^-?\d+(\.\d{1,9})?s$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BOOT_DISK_TYPES = ("pd-ssd", "pd-standard", "hyperdisk-balanced")
_SEGMENT = r"[^/:]+"
_PARENT = rf"/v1/projects/(?P<project>{_SEGMENT})/locations/(?P<location>{_SEGMENT})"


class ApiError(Exception):
    """A refusal in Google's error shape."""

    def __init__(self, status: int, message: str, details: list[dict[str, Any]] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.details = details or []


def google_error(
    status: int, message: str, details: list[dict[str, Any]] | None = None
) -> Response:
    """``{"error": {"code", "message", "status"[, "details"]}}`` as Google APIs answer."""
    err: dict[str, Any] = {
        "code": status,
        "message": message,
        "status": _HTTP_STATUS.get(status, "UNKNOWN"),
    }
    if details:
        err["details"] = details
    return Response(status, {"error": err})


def _get(obj: dict[str, Any] | None, camel: str, default: Any = None) -> Any:
    """Field by its JSON (camelCase) name, accepting the proto (snake_case) name too."""
    if not obj:
        return default
    if camel in obj:
        return obj[camel]
    snake = re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel)
    return obj.get(snake, default)


def _enum_name(kind: str, value: Any, field_path: str) -> str:
    """Enum by name or number -> name; refuses what the JSON mapping refuses."""
    table = ENUMS[kind]
    if isinstance(value, bool):
        value = str(value)
    if isinstance(value, int):
        for name, num in table.items():
            if num == value:
                return name
    elif isinstance(value, str) and value in table:
        return value
    shown = json.dumps(value) if isinstance(value, str) else str(value)
    raise ApiError(
        400,
        f"Invalid value at '{field_path}' (type.googleapis.com/{_ENUM_TYPE_URL.get(kind, kind)})"
        f", {shown}",
        [
            {
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [
                    {
                        "field": field_path,
                        "description": f"Invalid value at '{field_path}', {shown}",
                    }
                ],
            }
        ],
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
    required = "Required field is not set."
    display = _get(job, "displayName")
    if not display:
        problems.append(("custom_job.display_name", required))
    elif not isinstance(display, str) or len(display) > 128:
        problems.append(
            ("custom_job.display_name", "The display name must be at most 128 characters long.")
        )
    problems += _label_problems(_get(job, "labels"), "custom_job.labels")
    spec = _get(job, "jobSpec")
    if not spec:
        problems.append(("custom_job.job_spec", required))
        spec = {}
    pools = _get(spec, "workerPoolSpecs") or []
    if not pools:
        problems.append(("custom_job.job_spec.worker_pool_specs", required))
    for i, pool in enumerate(pools):
        where = f"custom_job.job_spec.worker_pool_specs[{i}]"
        if not pool:
            if i == 0:
                problems.append((where, "The first worker pool spec must not be empty."))
            continue
        machine = _get(pool, "machineSpec") or {}
        mtype = _get(machine, "machineType")
        acc_raw = _get(machine, "acceleratorType", 0)
        acc = _enum_name("AcceleratorType", acc_raw, f"{where}.machine_spec.accelerator_type")
        if isinstance(machine, dict) and ({"acceleratorType", "accelerator_type"} & set(machine)):
            machine.pop("accelerator_type", None)
            machine["acceleratorType"] = acc  # stored by name; answered as the client asks
        count = int(_get(machine, "acceleratorCount", 0) or 0)
        if not mtype:
            problems.append((f"{where}.machine_spec.machine_type", required))
        else:
            msg = check_machine(mtype, acc, count)
            if msg:
                problems.append((f"{where}.machine_spec", msg))
        replicas_raw = _get(pool, "replicaCount")
        replicas = int(replicas_raw) if replicas_raw not in (None, "") else 0
        if replicas < 1:
            problems.append((f"{where}.replica_count", "replica_count must be at least 1."))
        elif i == 0 and replicas != 1:
            problems.append(
                (f"{where}.replica_count", "The first worker pool must have exactly 1 replica.")
            )
        container = _get(pool, "containerSpec")
        package = _get(pool, "pythonPackageSpec")
        if container and package:
            problems.append(
                (where, "Only one of container_spec and python_package_spec may be set.")
            )
        elif not container and not package:
            problems.append((f"{where}.task", required))
        elif package:
            raise ApiError(
                501, "python_package_spec is not supported by the fake; use containerSpec."
            )
        else:
            if not _get(container, "imageUri"):
                problems.append((f"{where}.container_spec.image_uri", required))
            envs = _get(container, "env") or []
            if len(envs) > MAX_ENV_VARS:  # ContainerSpec.env: "Maximum limit is 100."
                problems.append(
                    (
                        f"{where}.container_spec.env",
                        f"At most {MAX_ENV_VARS} environment variables are allowed, got "
                        f"{len(envs)}.",
                    )
                )
            for j, env in enumerate(envs):
                name = _get(env, "name")
                if not name:
                    problems.append((f"{where}.container_spec.env[{j}].name", required))
                elif not _ENV_NAME.match(name):
                    problems.append(
                        (f"{where}.container_spec.env[{j}].name", f"Invalid env name '{name}'.")
                    )
        disk = _get(pool, "diskSpec") or {}
        dtype = _get(disk, "bootDiskType")
        if dtype and dtype not in _BOOT_DISK_TYPES:
            problems.append(
                (
                    f"{where}.disk_spec.boot_disk_type",
                    f"Boot disk type '{dtype}' is not supported. "
                    f"Use one of {list(_BOOT_DISK_TYPES)}.",
                )
            )
        dsize = _get(disk, "bootDiskSizeGb")
        if dsize not in (None, 0, "0") and not 100 <= int(dsize) <= 64000:
            problems.append(
                (f"{where}.disk_spec.boot_disk_size_gb", "Boot disk size must be 100 to 64000 GB.")
            )
    sched = _get(spec, "scheduling")
    if sched:
        if "strategy" in sched or "strategy" in {k.lower() for k in sched}:
            sched["strategy"] = _enum_name(
                "Strategy", _get(sched, "strategy"), "custom_job.job_spec.scheduling.strategy"
            )
        for key, snake in (("timeout", "timeout"), ("maxWaitDuration", "max_wait_duration")):
            val = _get(sched, key)
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
    base = _get(spec, "baseOutputDirectory")
    if base is not None:
        prefix = _get(base, "outputUriPrefix") or ""
        if not prefix.startswith("gs://") or len(prefix) <= len("gs://"):
            problems.append(
                (
                    "custom_job.job_spec.base_output_directory.output_uri_prefix",
                    f"Output uri prefix '{prefix}' must be a Cloud Storage path (gs://...).",
                )
            )
    account = _get(spec, "serviceAccount")
    if account and "@" not in account:
        problems.append(
            ("custom_job.job_spec.service_account", f"Invalid service account '{account}'.")
        )
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


def _render(obj: Any, ints: bool) -> Any:
    """Deep copy for output with enums as numbers when the client asked for them."""
    if isinstance(obj, dict):
        out = {}
        for key, val in obj.items():
            if ints and key == "state" and isinstance(val, str) and val in ENUMS["JobState"]:
                out[key] = ENUMS["JobState"][val]
            elif ints and key == "strategy" and val in ENUMS["Strategy"]:
                out[key] = ENUMS["Strategy"][val]
            elif ints and key == "acceleratorType" and val in ENUMS["AcceleratorType"]:
                out[key] = ENUMS["AcceleratorType"][val]
            else:
                out[key] = _render(val, ints)
        return out
    if isinstance(obj, list):
        return [_render(v, ints) for v in obj]
    return obj


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LogEntry:
    ts: float
    visible_at: float
    task: str
    stream: str
    text: str
    seq: int


@dataclass
class Job:
    """One CustomJob: the resource as answered plus what runs it."""

    resource: dict[str, Any]
    project: str
    location: str
    job_id: str
    cancel: threading.Event = field(default_factory=threading.Event)
    logs: list[LogEntry] = field(default_factory=list)
    thread: threading.Thread | None = None
    runs: list[runner_mod.JobRun] = field(default_factory=list)
    final: tuple[str, dict[str, Any] | None] | None = None

    @property
    def state(self) -> str:
        return str(self.resource["state"])


class VertexService(FakeService):
    """Routes, job store and the job lifecycle."""

    name = "vertex"

    def __init__(
        self,
        gcs_emulator_host: str | None = None,
        mode: str | None = None,
        queue_seconds: float = 0.05,
        provision_seconds: float = 0.05,
        tmp_base: str | None = None,
        keep_workdirs: bool = False,
    ) -> None:
        super().__init__()
        self.gcs_emulator_host = gcs_emulator_host or os.environ.get("STORAGE_EMULATOR_HOST")
        self.runner = runner_mod.Runner(
            mode or os.environ.get("STEPOP_FAKE_MODE") or runner_mod.MODE_PROCESS,
            tmp_base=tmp_base,
        )
        self.queue_seconds = float(queue_seconds)
        self.provision_seconds = float(provision_seconds)
        self.tmp_base = tmp_base
        self.keep_workdirs = keep_workdirs
        self.jobs: dict[str, Job] = {}  # full resource name -> job
        self._lock = threading.RLock()
        self._log_seq = 0
        self._stopping = threading.Event()
        jobs = rf"{_PARENT}/customJobs"
        one = rf"{jobs}/(?P<job>[0-9A-Za-z_-]+)"
        r = self.router
        r.add("POST", jobs, "CreateCustomJob", self.create)
        r.add("GET", jobs, "ListCustomJobs", self.list)
        r.add("GET", one, "GetCustomJob", self.get)
        r.add("POST", rf"{one}:cancel", "CancelCustomJob", self.cancel_job)
        r.add("DELETE", one, "DeleteCustomJob", self.delete)
        r.add("GET", rf"{one}/operations/(?P<op>\d+)", "GetOperation", self.get_operation)
        r.add("POST", r"/v2/entries:list", "ListLogEntries", self.list_log_entries)
        r.add("GET", r"/_fake/logs/(?P<job>[0-9A-Za-z_-]+)", "FakeLogs", self.fake_logs)

    # --- errors --------------------------------------------------------------------------
    def error_response(self, status: int, message: str, kind: str) -> Response:
        if kind == "throttle":
            message = (
                "Quota exceeded for quota metric 'Resource management (CRUD) requests' and limit "
                "'Resource management (CRUD) requests per minute per region' of service "
                "'aiplatform.googleapis.com' for consumer 'project_number:000000000000'."
            )
        elif kind == "error" and status == 503:
            message = "The service is currently unavailable."
        elif kind == "error":
            message = "Internal error encountered."
        return google_error(status, message)

    def dispatch(self, req: Request) -> Response:
        try:
            return super().dispatch(req)
        except ApiError as exc:
            return google_error(exc.status, exc.message, exc.details)

    # --- helpers -------------------------------------------------------------------------
    @staticmethod
    def _ints(req: Request) -> bool:
        return "enum-encoding=int" in (req.arg("$alt") or "")

    def _job(self, req: Request) -> Job:
        m = req.match
        assert m is not None
        name = f"projects/{m['project']}/locations/{m['location']}/customJobs/{m['job']}"
        with self._lock:
            job = self.jobs.get(name)
        if job is None:
            raise ApiError(404, f'The CustomJob "{name}" does not exist.')
        return job

    def _answer(self, req: Request, job: Job) -> Response:
        with self._lock:
            return Response(200, _render(job.resource, self._ints(req)))

    def _set_state(self, job: Job, state: str, **extra: Any) -> None:
        with self._lock:
            now = time.time()
            job.resource["state"] = state
            job.resource["updateTime"] = rfc3339(now)
            if state == "JOB_STATE_RUNNING" and "startTime" not in job.resource:
                job.resource["startTime"] = rfc3339(now)
            if state in TERMINAL:
                job.resource["endTime"] = rfc3339(now)
            job.resource.update(extra)

    # --- API -----------------------------------------------------------------------------
    def create(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        try:
            body = req.json()
        except ValueError as exc:
            raise ApiError(400, f"Invalid JSON payload received. {exc}") from exc
        body = validate_custom_job(body)
        job_id = str(secrets.randbelow(9 * 10**18) + 10**18)
        name = f"projects/{m['project']}/locations/{m['location']}/customJobs/{job_id}"
        now = rfc3339(time.time())
        resource: dict[str, Any] = {
            "name": name,
            "displayName": _get(body, "displayName"),
            "jobSpec": _get(body, "jobSpec"),
            "state": "JOB_STATE_QUEUED",
            "createTime": now,
            "updateTime": now,
        }
        if _get(body, "labels"):
            resource["labels"] = _get(body, "labels")
        if _get(body, "encryptionSpec"):
            resource["encryptionSpec"] = _get(body, "encryptionSpec")
        job = Job(resource, m["project"], m["location"], job_id)
        with self._lock:
            self.jobs[name] = job
        job.thread = threading.Thread(
            target=self._lifecycle, args=(job,), name=f"vertex-{job_id}", daemon=True
        )
        job.thread.start()
        return self._answer(req, job)

    def get(self, req: Request) -> Response:
        return self._answer(req, self._job(req))

    def list(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        prefix = f"projects/{m['project']}/locations/{m['location']}/customJobs/"
        flt = _parse_filter(req.arg("filter") or "")
        with self._lock:
            jobs = [j for n, j in self.jobs.items() if n.startswith(prefix)]
            jobs = [j for j in jobs if _matches(j.resource, flt)]
            jobs.sort(key=lambda j: (j.resource["createTime"], j.job_id), reverse=True)
            size = int(req.arg("pageSize") or 0) or 100
            size = min(size, 1000)
            start = _decode_token(req.arg("pageToken"))
            page = jobs[start : start + size]
            body: dict[str, Any] = {
                "customJobs": [_render(j.resource, self._ints(req)) for j in page]
            }
            if start + size < len(jobs):
                body["nextPageToken"] = _encode_token(start + size)
        return Response(200, body)

    def cancel_job(self, req: Request) -> Response:
        job = self._job(req)
        with self._lock:
            if job.state in TERMINAL:
                raise ApiError(
                    400,
                    f'Cannot cancel CustomJob "{job.resource["name"]}" because it is in state '
                    f"{job.state}.",
                )
            if job.state != "JOB_STATE_CANCELLING":
                self._set_state(job, "JOB_STATE_CANCELLING")
            job.cancel.set()
        return Response(200, {})

    def delete(self, req: Request) -> Response:
        job = self._job(req)
        with self._lock:
            if job.state not in TERMINAL:
                raise ApiError(
                    400,
                    f'CustomJob "{job.resource["name"]}" is in state {job.state}; cancel it and '
                    "wait for a final state before deleting it.",
                )
            del self.jobs[job.resource["name"]]
        return Response(200, self._operation(job.resource["name"], "1"))

    def get_operation(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        name = f"projects/{m['project']}/locations/{m['location']}/customJobs/{m['job']}"
        return Response(200, self._operation(name, m["op"]))

    @staticmethod
    def _operation(job_name: str, op: str) -> dict[str, Any]:
        now = rfc3339(time.time())
        return {
            "name": f"{job_name}/operations/{op}",
            "metadata": {
                "@type": "type.googleapis.com/google.cloud.aiplatform.v1.DeleteOperationMetadata",
                "genericMetadata": {"createTime": now, "updateTime": now},
            },
            "done": True,
            "response": {"@type": "type.googleapis.com/google.protobuf.Empty"},
        }

    # --- logs ----------------------------------------------------------------------------
    def _log(self, job: Job, task: str, stream: str, text: str, ts: float | None = None) -> None:
        ts = ts or time.time()
        delay = self.faults.seconds("log_delay")
        with self._lock:
            self._log_seq += 1
            job.logs.append(LogEntry(ts, ts + delay, task, stream, text, self._log_seq))

    def _visible_logs(self, job: Job, task: str | None = None) -> list[LogEntry]:
        now = time.time()
        with self._lock:
            return [e for e in job.logs if e.visible_at <= now and (task is None or e.task == task)]

    def fake_logs(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        with self._lock:
            found = [j for j in self.jobs.values() if j.job_id == m["job"]]
        if not found:
            raise ApiError(404, f"no job with id {m['job']}")
        lines = [e.text for e in self._visible_logs(found[0], req.arg("task"))]
        text = "".join(line + "\n" for line in lines)
        return Response(200, raw=text.encode(), content_type="text/plain; charset=utf-8")

    def list_log_entries(self, req: Request) -> Response:
        """Cloud Logging v2 ``entries:list`` for ``resource.type="ml_job"`` entries."""
        try:
            body = req.json() or {}
        except ValueError as exc:
            raise ApiError(400, f"Invalid JSON payload received. {exc}") from exc
        flt = body.get("filter", "")
        clauses = _parse_filter(flt)
        ids = {v for g in clauses for f, op, v, neg in g if f == "resource.labels.job_id"}
        job_id = ids.pop() if len(ids) == 1 and len(clauses) == 1 else None
        with self._lock:
            jobs = [j for j in self.jobs.values() if job_id is None or j.job_id == job_id]
        entries: list[tuple[Job, LogEntry]] = []
        for job in jobs:
            for e in self._visible_logs(job):
                if _log_matches(job, e, clauses):
                    entries.append((job, e))
        entries.sort(key=lambda pair: (pair[1].ts, pair[1].seq))
        if (body.get("orderBy") or "").strip().lower().endswith("desc"):
            entries.reverse()
        size = int(body.get("pageSize") or 0) or 1000
        start = _decode_token(body.get("pageToken"))
        page = entries[start : start + size]
        out: dict[str, Any] = {"entries": [_log_json(j, e) for j, e in page]}
        if start + size < len(entries):
            out["nextPageToken"] = _encode_token(start + size)
        return Response(200, out)

    # --- the job's life ------------------------------------------------------------------
    def _wait(self, job: Job, seconds: float) -> bool:
        """Wait ``seconds`` unless cancelled; True when cancelled."""
        return job.cancel.wait(max(0.0, seconds)) or self._stopping.is_set()

    def _finish_cancel(self, job: Job) -> None:
        self._set_state(
            job, "JOB_STATE_CANCELLED", error={"code": CODE_CANCELLED, "message": "CANCELED"}
        )

    def _lifecycle(self, job: Job) -> None:
        workdir = None
        try:
            if self._wait(job, self.queue_seconds):
                return self._finish_cancel(job)
            self._set_state(job, "JOB_STATE_PENDING")
            delay = self.provision_seconds + self.faults.seconds("provisioning_delay")
            if self._wait(job, delay):
                return self._finish_cancel(job)
            failure = self.faults.take_job_fault("job_failure", job.resource["displayName"])
            if failure is not None:
                reason = failure.get("reason") or (
                    "The zone does not have enough resources available to fulfill the request. "
                    "Try a different zone, or try again later."
                )
                code = int(failure.get("code", CODE_RESOURCE_EXHAUSTED))
                state = failure.get("state") or "JOB_STATE_FAILED"
                if state == "JOB_STATE_PAUSED":  # not an end: it sits there until cancelled
                    self._set_state(job, state)
                    while not self._wait(job, 3600):
                        pass
                    return self._finish_cancel(job)
                if state not in ("JOB_STATE_FAILED", "JOB_STATE_EXPIRED"):
                    state = "JOB_STATE_FAILED"
                return self._set_state(job, state, error={"code": code, "message": reason})
            workdir = tempfile.mkdtemp(prefix=f"stepop-vertex-{job.job_id}-", dir=self.tmp_base)
            self._run_attempts(job, workdir)
        except Exception as exc:  # the fake's own bug: fail the job visibly, not silently
            self._log(job, "service", "stderr", f"fake internal error: {exc!r}")
            self._set_state(
                job,
                "JOB_STATE_FAILED",
                error={"code": CODE_INTERNAL, "message": f"Internal error: {exc!r}"},
            )
        finally:
            for run in job.runs:
                self.runner.forget(run)
                if not self.keep_workdirs:
                    run.cleanup()
            if workdir and not self.keep_workdirs:
                shutil.rmtree(workdir, ignore_errors=True)

    def _run_attempts(self, job: Job, workdir: str) -> None:
        spec = job.resource["jobSpec"]
        sched = _get(spec, "scheduling") or {}
        spot = _get(sched, "strategy") == "SPOT"
        retries = not _get(sched, "disableRetries", False)
        gcs_dir = os.path.join(workdir, "gcs")
        client, snapshots = self._gcs_down(job, gcs_dir)
        try:
            while True:
                outcome = self._run_once(job, workdir, gcs_dir, sched)
                if outcome != "preempted":
                    break
                self._log(job, "service", "stderr", "The replicas were preempted (Spot VM).")
                if not (spot and retries):
                    self._set_state(
                        job,
                        "JOB_STATE_FAILED",
                        error={
                            "code": CODE_UNAVAILABLE,
                            "message": "The job was preempted: its Spot VMs were reclaimed by "
                            "Compute Engine.",
                        },
                    )
                    break
                self._set_state(job, "JOB_STATE_PENDING")
                if self._wait(job, self.provision_seconds):
                    self._finish_cancel(job)
                    break
        finally:
            self._gcs_up(job, gcs_dir, client, snapshots)
        final, job.final = job.final, None
        if final is not None:
            state, error = final
            if error is None:
                self._set_state(job, state)
            else:
                self._set_state(job, state, error=error)

    def _gcs_down(self, job: Job, gcs_dir: str) -> tuple[Any, dict[str, Any]]:
        os.makedirs(gcs_dir, exist_ok=True)
        if not self.gcs_emulator_host:
            return None, {}
        texts = [json.dumps(job.resource["jobSpec"])]
        client = storage_client(self.gcs_emulator_host)
        snapshots: dict[str, Any] = {}
        for bucket in referenced_buckets(texts):
            snap = sync_down(client, bucket, os.path.join(gcs_dir, bucket))
            if snap is None:
                self._log(job, "service", "stderr", f"gcsfuse: bucket {bucket} does not exist")
                continue
            snapshots[bucket] = snap
        return client, snapshots

    def _gcs_up(self, job: Job, gcs_dir: str, client: Any, snapshots: dict[str, Any]) -> None:
        if client is None:
            return
        for bucket, snap in snapshots.items():
            try:
                sync_up(client, bucket, os.path.join(gcs_dir, bucket), snap)
            except Exception as exc:
                self._log(job, "service", "stderr", f"gcsfuse: upload to {bucket} failed: {exc!r}")

    def _launches(self, job: Job, workdir: str, gcs_dir: str) -> list[runner_mod.JobLaunch]:
        """One launch per worker pool, one node per replica, with Vertex's environment."""
        spec = job.resource["jobSpec"]
        pools = _get(spec, "workerPoolSpecs")
        addrs: dict[str, list[str]] = {}
        for i, pool in enumerate(pools):
            if pool:
                n = int(_get(pool, "replicaCount") or 1)
                addrs[f"workerpool{i}"] = [f"127.0.0.1:{_free_port()}" for _ in range(n)]
        world = sum(len(v) for v in addrs.values())
        master_host, master_port = addrs["workerpool0"][0].split(":")
        base_env = {
            "CLOUD_ML_JOB_ID": job.job_id,
            "CLOUD_ML_PROJECT_ID": job.project,
            "CLOUD_ML_REGION": job.location,
            "MASTER_ADDR": master_host,
            "MASTER_PORT": master_port,
            "WORLD_SIZE": str(world),
        }
        base = _get(_get(spec, "baseOutputDirectory"), "outputUriPrefix")
        if base:
            base = base.rstrip("/")
            base_env.update(
                AIP_MODEL_DIR=f"{base}/model/",
                AIP_CHECKPOINT_DIR=f"{base}/checkpoints/",
                AIP_TENSORBOARD_LOG_DIR=f"{base}/logs/",
            )
        mode = (job.resource.get("labels") or {}).get("stepop_fake_mode") or self.runner.mode
        launches = []
        rank = 0
        for i, pool in enumerate(pools):
            if not pool:
                continue
            pool_name = f"workerpool{i}"
            container = _get(pool, "containerSpec")
            env = dict(base_env)
            env.update(
                {_get(e, "name"): _get(e, "value", "") for e in _get(container, "env") or []}
            )
            nodes = []
            for index, _addr in enumerate(addrs[pool_name]):
                task = {"type": pool_name, "index": index}
                cluster = {
                    "cluster": addrs,
                    "environment": "cloud",
                    "task": task,
                    "job": json.dumps(_render(spec, False)),
                }
                tf_config = {"cluster": addrs, "task": task, "environment": "cloud"}
                node_env = {
                    "CLUSTER_SPEC": json.dumps(cluster),
                    "TF_CONFIG": json.dumps(tf_config),
                    "RANK": str(rank),
                }
                nodes.append(runner_mod.NodeSpec(f"{pool_name}-{index}", rank=rank, env=node_env))
                rank += 1
            launches.append(
                runner_mod.JobLaunch(
                    fake="vertex",
                    name=f"{job.job_id}-{pool_name}",
                    image=_get(container, "imageUri"),
                    entrypoint=list(_get(container, "command") or []) or None,
                    args=list(_get(container, "args") or []) or None,
                    env=env,
                    mounts=[runner_mod.Mount(gcs_dir, "/gcs")],
                    nodes=nodes,
                    labels={"stepop.vertex.job": job.job_id, "stepop.mode": mode},
                )
            )
        return launches

    def _run_once(self, job: Job, workdir: str, gcs_dir: str, sched: dict[str, Any]) -> str:
        """Start every node, wait for the end; returns "done", "preempted" or "cancelled"."""
        launches = self._launches(job, workdir, gcs_dir)
        runs: list[runner_mod.JobRun] = []
        for launch in launches:
            mode = launch.labels["stepop.mode"]
            pool_dir = os.path.join(workdir, "pools", launch.name, str(len(job.runs)))
            os.makedirs(pool_dir, exist_ok=True)

            def sink(node: runner_mod.NodeSpec, stream: str, line: str, ts: float) -> None:
                self._log(job, node.host, stream, line, ts)

            try:
                run = self.runner.launch(launch, on_line=sink, mode=mode, workdir=pool_dir)
            except runner_mod.LaunchError as exc:
                for other in runs:
                    other.stop(grace=1)
                self._log(job, "service", "stderr", str(exc))
                job.final = (
                    "JOB_STATE_FAILED",
                    {
                        "code": CODE_INVALID_ARGUMENT,
                        "message": f"Unable to start the replicas of {launch.name}: {exc}",
                    },
                )
                return "done"
            runs.append(run)
            job.runs.append(run)
        self._set_state(job, "JOB_STATE_RUNNING")
        started = time.monotonic()
        timeout = _seconds(_get(sched, "timeout"))
        preempt = self.faults.take_job_fault("preempt", job.resource["displayName"])
        preempt_at = started + float(preempt.get("after_seconds", 0.5)) if preempt else None
        while True:
            codes = [r.result() for r in runs]
            failed = next(
                ((r, c) for r, c in zip(runs, codes, strict=True) if c not in (None, 0)), None
            )
            if failed is not None:
                for r in runs:
                    r.stop(grace=2)
                run, code = failed
                replica = next(
                    (n.spec.host for n in run.nodes if n.exit_code() not in (None, 0)),
                    run.nodes[0].spec.host,
                )
                job.final = (
                    "JOB_STATE_FAILED",
                    {
                        "code": CODE_INVALID_ARGUMENT,
                        "message": self._exit_message(job, replica, code),
                    },
                )
                return "done"
            if all(c == 0 for c in codes):
                job.final = ("JOB_STATE_SUCCEEDED", None)
                return "done"
            if job.cancel.is_set() or self._stopping.is_set():
                for r in runs:
                    r.stop(grace=5)
                job.final = (
                    "JOB_STATE_CANCELLED",
                    {"code": CODE_CANCELLED, "message": "CANCELED"},
                )
                return "cancelled"
            now = time.monotonic()
            if preempt_at is not None and now >= preempt_at:
                for r in runs:
                    r.stop(grace=2)
                return "preempted"
            if timeout is not None and now - started > timeout:
                for r in runs:
                    r.stop(grace=2)
                job.final = (
                    "JOB_STATE_FAILED",
                    {
                        "code": CODE_DEADLINE_EXCEEDED,
                        "message": f"Job exceeded the timeout of {_get(sched, 'timeout')}.",
                    },
                )
                return "done"
            job.cancel.wait(0.05)

    @staticmethod
    def _exit_message(job: Job, replica: str, code: int) -> str:
        reason = "Error"
        if code == 137:
            reason = "OOMKilled or SIGKILL"
        query = f"resource.type%3D%22ml_job%22%0Aresource.labels.job_id%3D%22{job.job_id}%22"
        return (
            f"The replica {replica} exited with a non-zero status of {code}. Termination reason: "
            f"{reason}. To find out more about why your job exited please check the logs: "
            f"https://console.cloud.google.com/logs/viewer?project={job.project}"
            f"&resource=ml_job%2Fjob_id%2F{job.job_id}&advancedFilter={query}"
        )

    # --- state ---------------------------------------------------------------------------
    def reset(self, jobs: bool) -> None:
        if not jobs:
            return
        with self._lock:
            alive = list(self.jobs.values())
        for job in alive:
            job.cancel.set()
        for job in alive:
            if job.thread is not None:
                job.thread.join(timeout=30)
        with self._lock:
            self.jobs.clear()

    def shutdown(self) -> None:
        self._stopping.set()
        with self._lock:
            alive = list(self.jobs.values())
        for job in alive:
            job.cancel.set()
        for job in alive:
            if job.thread is not None:
                job.thread.join(timeout=30)
        self.runner.stop_all(grace=2)


# --- filters and pages -----------------------------------------------------------------------
_CLAUSE = re.compile(
    r"\s*(?P<neg>NOT\s+|-)?(?P<field>[A-Za-z_][\w.]*)\s*(?P<op>!=|>=|<=|=|>|<|:)\s*"
    r'(?P<value>"(?:[^"\\]|\\.)*"|\S+)'
)
_FIELD_ALIASES = {
    "displayName": "display_name",
    "createTime": "create_time",
    "updateTime": "update_time",
}
_TIME_FIELDS = ("create_time", "update_time", "timestamp")

Clause = tuple[str, str, str, bool]  # field, operator, value, negated
Filter = list[list[Clause]]  # OR of ANDs


def _parse_filter(text: str) -> Filter:
    """AIP-160 filters as list and log polling use them: ``a="x" AND (b>y OR NOT c:z)``.

    Parentheses are dropped and OR binds looser than AND, which is exact for the flat filters
    a poller writes; nested mixes of AND/OR inside parentheses are not supported.
    """
    text = text.strip()
    if not text:
        return [[]]
    groups: Filter = []
    flat = re.sub(r"[()]", " ", text)
    for group in re.split(r"\s+OR\s+", flat):
        clauses: list[Clause] = []
        for part in re.split(r"\s+AND\s+", group.strip()):
            m = _CLAUSE.fullmatch(part.strip())
            if m is None:
                raise ApiError(400, f'Invalid filter: "{text}"')
            value = m["value"]
            if value.startswith('"'):
                value = json.loads(value)
            field_name = _FIELD_ALIASES.get(m["field"], m["field"])
            clauses.append((field_name, m["op"], value, bool(m["neg"])))
        groups.append(clauses)
    return groups


def _timestamp(value: str) -> float:
    from datetime import datetime

    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError as exc:
        raise ApiError(400, f'Invalid timestamp "{value}" in filter.') from exc


def _compare(actual: Any, op: str, expected: str, is_time: bool = False) -> bool:
    if actual is None:
        return op == "!="
    left: Any = str(actual)
    right: Any = expected
    if is_time:
        left, right = _timestamp(left), _timestamp(right)
    if op in ("=", ":"):
        return left == right
    if op == "!=":
        return left != right
    return {">": left > right, "<": left < right, ">=": left >= right, "<=": left <= right}[op]


def _evaluate(flt: Filter, actual_of: Any) -> bool:
    """Any OR group whose every clause holds; ``actual_of(field)`` gives the value to compare."""
    for group in flt:
        ok = True
        for fld, op, value, negated in group:
            actual, value = actual_of(fld, value)
            if fld.startswith("labels.") and op == ":" and value == "*":
                held = actual is not None
            else:
                held = _compare(actual, op, value, fld in _TIME_FIELDS)
            if held == negated:
                ok = False
                break
        if ok:
            return True
    return False


def _matches(resource: dict[str, Any], flt: Filter) -> bool:
    def actual_of(fld: str, value: str) -> tuple[Any, str]:
        if fld == "display_name":
            return resource.get("displayName"), value
        if fld == "state":
            if value.isdigit():
                value = next((k for k, v in ENUMS["JobState"].items() if v == int(value)), value)
            return resource.get("state"), value
        if fld.startswith("labels."):
            return (resource.get("labels") or {}).get(fld[len("labels.") :]), value
        if fld in ("create_time", "update_time"):
            return resource.get("createTime" if fld == "create_time" else "updateTime"), value
        raise ApiError(400, f'Unsupported filter field "{fld}".')

    return _evaluate(flt, actual_of)


def _log_matches(job: Job, entry: LogEntry, flt: Filter) -> bool:
    def actual_of(fld: str, value: str) -> tuple[Any, str]:
        if fld == "resource.type":
            return "ml_job", value
        if fld == "resource.labels.job_id":
            return job.job_id, value
        if fld == "resource.labels.task_name":
            return entry.task, value
        if fld == "timestamp":
            return rfc3339(entry.ts), value
        if fld == "severity":
            return ("ERROR" if entry.stream == "stderr" else "INFO"), value
        if fld == "logName":
            return f"projects/{job.project}/logs/{entry.task}", value
        raise ApiError(400, f'Unsupported filter field "{fld}".')

    return _evaluate(flt, actual_of)


def _log_json(job: Job, entry: LogEntry) -> dict[str, Any]:
    return {
        "logName": f"projects/{job.project}/logs/{entry.task}",
        "resource": {
            "type": "ml_job",
            "labels": {"job_id": job.job_id, "project_id": job.project, "task_name": entry.task},
        },
        "textPayload": entry.text,
        "timestamp": rfc3339(entry.ts),
        "receiveTimestamp": rfc3339(entry.visible_at),
        "severity": "ERROR" if entry.stream == "stderr" else "INFO",
        "insertId": f"{entry.seq:016x}",
    }


def _encode_token(offset: int) -> str:
    return base64.urlsafe_b64encode(f"o:{offset}".encode()).decode()


def _decode_token(token: str | None) -> int:
    if not token:
        return 0
    try:
        kind, _, num = base64.urlsafe_b64decode(token.encode()).decode().partition(":")
        if kind != "o":
            raise ValueError(token)
        return int(num)
    except ValueError as exc:
        raise ApiError(400, "Invalid page token.") from exc


def _seconds(duration: str | None) -> float | None:
    if not duration:
        return None
    return float(duration[:-1])


# --- entry points ------------------------------------------------------------------------------
def settings_from_env(env: dict[str, str]) -> dict[str, Any]:
    """Settings from the stack's env (``cloud.stack``): storage emulator and state directory."""
    settings: dict[str, Any] = {}
    if env.get("STORAGE_EMULATOR_HOST"):
        settings["gcs_emulator_host"] = env["STORAGE_EMULATOR_HOST"]
    if env.get("STEPOP_CLOUD_DIR"):
        # job roots under .cloud/jobs, where `cloud.stack down` looks for leftover job PIDs
        jobs = os.path.join(env["STEPOP_CLOUD_DIR"], "jobs", "vertex")
        os.makedirs(jobs, exist_ok=True)
        settings["tmp_base"] = jobs
    if env.get("STEPOP_FAKE_MODE"):
        settings["mode"] = env["STEPOP_FAKE_MODE"]
    return settings


def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    env: dict[str, str] | None = None,
    **settings: Any,
) -> FakeServer:
    """Start the fake; returns the server (``.url``, ``.port``, ``.shutdown()``).

    Without ``env`` it runs in background threads and returns at once (tests, scripts).
    With ``env`` (the contract of ``python -m cloud.serve``, used by ``cloud.stack``) settings
    come from that env, explicit ``settings`` win, and the call blocks until SIGTERM/SIGINT.
    """
    if env is None:
        return FakeServer(VertexService(**settings), host, port)
    server = FakeServer(VertexService(**{**settings_from_env(env), **settings}), host, port)
    server.serve_until_interrupted()
    return server


def stack_env(url: str, env: dict[str, str]) -> dict[str, str]:
    """Extra ``.cloud/env`` lines: the Cloud Logging endpoint is this same server."""
    return {"STEPOP_VERTEX_LOGGING_ENDPOINT": url}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m cloud.vertex", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--gcs-emulator-host", default=os.environ.get("STORAGE_EMULATOR_HOST"))
    parser.add_argument("--mode", choices=runner_mod.MODES, default=None)
    parser.add_argument("--queue-seconds", type=float, default=0.05)
    parser.add_argument("--provision-seconds", type=float, default=0.05)
    parser.add_argument("--tmp-base", default=None)
    args = parser.parse_args(argv)
    server = serve(
        args.host,
        args.port,
        gcs_emulator_host=args.gcs_emulator_host,
        mode=args.mode,
        queue_seconds=args.queue_seconds,
        provision_seconds=args.provision_seconds,
        tmp_base=args.tmp_base,
    )
    print(f"vertex fake listening on {server.url}", flush=True)
    server.serve_until_interrupted()


if __name__ == "__main__":
    main()
