"""An Azure ML fake that speaks ARM REST as azure-ai-ml's MLClient sends it and runs command jobs.

Start it::

    python -m cloud.azureml --port 8092 \
        --storage-connection-string "$AZURE_STORAGE_CONNECTION_STRING"

or in-process: ``server = cloud.azureml.serve("127.0.0.1", 0, storage_connection_string=...)``.

Point the official client at it with a custom cloud and any credential that returns a token
(the fake checks none; base URLs over http make MLClient drop its https-only rule)::

    from azure.ai.ml import MLClient
    from azure.core.credentials import AccessToken

    class StaticToken:  # what a test credential needs
        def get_token(self, *scopes, **kw): return AccessToken("fake", 2**31)

    meta = cloud.azureml.cloud_metadata(server.url)   # resource_manager etc. -> the fake
    ml = MLClient(StaticToken(), SUBSCRIPTION, "rg", "ws", cloud="StepopFake", cloud_metadata=meta)

(``AZUREML_DEV_URL_MFE=<url>`` also redirects the ARM calls, but not the workspace discovery
the log stream needs; prefer ``cloud_metadata``.) Any subscription/resource group/workspace
name is accepted; each workspace gets a default blob datastore ``workspaceblobstore`` (Azurite
container ``azureml-blobstore``) and ``workspaceartifactstore`` (container ``azureml``).

What it serves (``{WS}`` = ``/subscriptions/{s}/resourceGroups/{rg}/providers/
Microsoft.MachineLearningServices/workspaces/{ws}``; any ``api-version`` is accepted):

``GET {WS}``                                   the workspace (with ``discoveryUrl``)
``PUT|GET {WS}/environments/{n}/versions/{v}``  environment versions: an image, or a build
                                               context (``build.contextUri``) the fake builds
                                               with the local engine in container mode
``GET {WS}/environments/{n}/versions``         list
``PUT|GET {WS}/jobs/{name}``, ``GET {WS}/jobs`` command jobs
``POST {WS}/jobs/{name}/cancel``               202 + ``Location`` (+ ``Retry-After``), polled at
                                               ``/subscriptions/{s}/providers/Microsoft.Machine
                                               LearningServices/locations/{region}/
                                               mfeOperationResults/jc:{id}`` (202 until
                                               Canceled, then 200)
``DELETE {WS}/jobs/{name}``                    a finished job (200)
``GET {WS}/datastores[/{n}]``, ``POST {WS}/datastores/{n}/listSecrets``  (Azurite's key)
``GET {WS}/computes[/{n}]``                    the named clusters of the ``computes`` setting
``GET /discovery/workspaces/{ws}``             workspace discovery (api/history -> the fake)
``GET /history/v1.0{WS-path}/runs/{run}/details``  run history: status, times, ``error``,
                                               ``logFiles`` (what ``MLClient.jobs.stream`` reads)
``/mlflow/v1.0{WS-path}/api/2.0/mlflow/...``    MLflow tracking: each job is a run
``GET /_fake/azureml/logs/{job}/{path}``       one log file (the ``logFiles`` URLs)
``GET /_fake/logs/{job}``                      all of a job's log lines as plain text
plus the control API of :mod:`cloud.fake_http` (``/_fake/faults``, ``/_fake/counters``...).

How a job runs: statuses NotStarted -> Starting -> Preparing -> Queued -> Running ->
Finalizing -> Completed | Failed, or CancelRequested -> Canceled. The environment's image
runs ``/bin/bash -c <command>`` with ``${{inputs.x}}``/``${{outputs.y}}`` replaced by the
paths Azure ML uses (``/mnt/azureml/cr/j/<id>/cap/data-capability/wd/INPUT_x`` and ``.../wd/y``;
working dir ``/mnt/azureml/cr/j/<id>/exe/wd``) and the env ``AZUREML_RUN_ID``,
``AZUREML_ARM_SUBSCRIPTION``/``_RESOURCEGROUP``/``_WORKSPACE_NAME``/``_PROJECT_NAME``,
``AZURE_ML_INPUT_<x>``, ``AZURE_ML_OUTPUT_<y>``, MLflow's ``MLFLOW_TRACKING_URI``/``_RUN_ID``/
``_EXPERIMENT_ID``/``_EXPERIMENT_NAME``/``_TRACKING_TOKEN`` (the job is a run of its experiment
on the fake's tracking server, :mod:`cloud.azureml_mlflow`), the job's ``environmentVariables``
and, per process, ``RANK``/``LOCAL_RANK``/``NODE_RANK``/``WORLD_SIZE``/``MASTER_ADDR``/
``MASTER_PORT`` (``resources.instanceCount`` x ``distribution.processCountPerInstance``
processes). Inputs are downloaded from Azurite before the start and outputs uploaded after
the exit (a ``ReadWriteMount`` output first shows what its path already holds, as a mount would; see
:mod:`cloud.azureml_storage`); an output without a path goes to ``azureml://datastores/
workspaceblobstore/paths/azureml/{job}/{output}/`` as Azure ML does. In process mode
``python`` in the command is this virtualenv's interpreter.

Logs: ``user_logs/std_log.txt`` (``std_log_process_<rank>.txt`` when several processes), served
live by the fake (run details ``logFiles``) and uploaded at the end to the artifact store
(container ``azureml``, ``ExperimentRun/dcid.<job>/user_logs/...``) as Azure ML keeps them.

Failures: the ARM job resource carries no error (as in Azure); the reason is in run history
details ``error.error`` ({code: UserError, message: "Execution failed. User process
'/bin/bash' exited with status code N. ..."}), which is what MLClient.jobs.stream raises.
Fault kinds: ``throttle`` (429 ``TooManyRequests`` with ``Retry-After``: rule field
``retry_after``, default 1 s; azure-core retries it by itself), ``error`` (5xx, ARM shape),
``provisioning_delay``, ``job_failure`` (``reason``; ``code`` default ``ServiceError``;
``status`` Failed (default), NotResponding or Paused: the job then stays there until cancelled),
``preempt`` (a ``queueSettings.jobTier: Spot`` job is requeued and restarted from scratch;
other tiers fail), ``log_delay``.

Settings (``serve(**settings)`` / command line / env):

``storage_connection_string``  Azurite (env ``AZURE_STORAGE_CONNECTION_STRING``); without it
                      inputs cannot be resolved and outputs are dropped.
``mode``              ``process`` (default) or ``container`` (env ``STEPOP_FAKE_MODE``); a job
                      tagged ``stepop_fake_mode: container|process`` overrides it.
``region``            the workspace location (``eastus``).
``phase_seconds``     time spent in each of Starting/Preparing/Queued (0.05 s).
``lro_retry_after``   ``Retry-After`` seconds on 202 answers (1; azure-core reads 0 as "use
                      its own polling_interval", 30 s by default, so keep it >= 1).
``computes``          named clusters ``{name: vm size}`` (``cpu-cluster``: Standard_DS3_v2,
                      ``gpu-cluster``: Standard_NC6s_v3).
``tmp_base``          where per-job directories go.

Integration notes for cloud-up
------------------------------
* ``serve(host, port, env)`` (the ``cloud.serve`` contract) reads
  ``AZURE_STORAGE_CONNECTION_STRING`` and ``STEPOP_CLOUD_DIR`` from the stack env and blocks;
  ``stack_env(url, env)`` adds ``STEPOP_AZUREML_SUBSCRIPTION``/``_RESOURCE_GROUP``/``_WORKSPACE``
  (any values work; these are the suggested ones) and ``AIRFLOW_CONN_AZUREML_DEFAULT``: an
  ``azure_ml`` connection (``airflow_stepop.hooks.azureml``) whose extra carries the workspace,
  ``endpoint`` (the fake's https URL), ``ca_bundle`` and ``emulator_token`` (a placeholder
  token: the fake checks none). The datastores' containers exist once the fake answers, as a
  real workspace's do, so ``abfs://azureml-blobstore/...`` is an artifact root at once.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from cloud import runner as runner_mod
from cloud.azureml_catalog import canonical_instance_type
from cloud.azureml_mlflow import Tracking
from cloud.azureml_storage import blob_service, download, parse_uri, upload, upload_text
from cloud.fake_http import FakeServer, FakeService, Request, Response, rfc3339

PROVIDER = "Microsoft.MachineLearningServices"
_SEG = r"[^/]+"
WS = (
    rf"/subscriptions/(?P<sub>{_SEG})/[Rr]esource[Gg]roups/(?P<rg>{_SEG})/providers/"
    rf"{PROVIDER}/workspaces/(?P<ws>{_SEG})"
)
JOB_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,254}$")
ASSET_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]{0,254}$")
EXPERIMENT_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,254}$")
_ISO_DURATION = re.compile(r"^P(?!$)(\d+D)?(T(?=\d)(\d+H)?(\d+M)?(\d+(\.\d+)?S)?)?$")
_PLACEHOLDER = re.compile(r"\$\{\{\s*(inputs|outputs)\.([A-Za-z0-9_]+)\s*\}\}")

INPUT_TYPES = ("uri_folder", "uri_file", "literal", "mltable", "custom_model", "mlflow_model",
               "triton_model")  # fmt: skip
OUTPUT_TYPES = ("uri_folder", "uri_file", "mltable", "custom_model", "mlflow_model",
                "triton_model")  # fmt: skip
INPUT_MODES = ("ReadOnlyMount", "ReadWriteMount", "Download", "Direct", "EvalMount",
               "EvalDownload")  # fmt: skip
OUTPUT_MODES = ("ReadWriteMount", "Upload", "Direct")
JOB_TYPES = ("Command", "Sweep", "Pipeline", "AutoML", "Spark")
DISTRIBUTIONS = ("PyTorch", "TensorFlow", "Mpi", "Ray")
JOB_TIERS = ("Null", "Spot", "Basic", "Standard", "Premium")
TERMINAL = ("Completed", "Failed", "Canceled")
# Not ends: a job stays NotResponding or Paused until it is cancelled, as on the service.
STUCK = ("NotResponding", "Paused")
DEFAULT_COMPUTES = {"cpu-cluster": "Standard_DS3_v2", "gpu-cluster": "Standard_NC6s_v3"}
DATASTORES = {"workspaceblobstore": "azureml-blobstore", "workspaceartifactstore": "azureml"}
DEFAULT_DATASTORE = "workspaceblobstore"
AZURITE_ACCOUNT = "devstoreaccount1"


class ArmError(Exception):
    """A refusal in ARM's error shape."""

    def __init__(self, status: int, code: str, message: str, inner: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.inner = inner


def arm_error(
    status: int,
    code: str,
    message: str,
    inner: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """``{"error": {"code", "message", "details": [], "innerError"?}}`` as ARM/MFE answer."""
    err: dict[str, Any] = {"code": code, "message": message, "details": []}
    if inner:
        err["innerError"] = {"code": inner}
    return Response(status, {"error": err}, headers=headers or {})


def bad(message: str, inner: str = "BadArgument") -> ArmError:
    """A 400 UserError (what MFE answers for a request it understood and refuses)."""
    return ArmError(400, "UserError", message, inner)


def invalid(message: str) -> ArmError:
    """A 400 ValidationError (what MFE answers for a body that breaks the schema)."""
    return ArmError(400, "ValidationError", message)


def cloud_metadata(url: str) -> dict[str, str]:
    """The ``cloud_metadata`` for ``MLClient(cloud=..., cloud_metadata=...)`` -> this fake."""
    base = url.rstrip("/") + "/"
    return {
        "azure_portal": base,
        "resource_manager": base,
        "active_directory": base,
        "aml_resource_id": base,
        "storage_endpoint": "core.windows.net",
        "registry_discovery_endpoint": base,
    }


@dataclass
class LogLine:
    ts: float
    visible_at: float
    file: str
    text: str


@dataclass
class AmlJob:
    """One job: the ARM resource as answered plus what runs it."""

    resource: dict[str, Any]
    sub: str
    rg: str
    ws: str
    name: str
    created: float
    started: float | None = None
    ended: float | None = None
    error: dict[str, Any] | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    logs: list[LogLine] = field(default_factory=list)
    thread: threading.Thread | None = None
    runs: list[runner_mod.JobRun] = field(default_factory=list)
    final: tuple[str, dict[str, Any] | None] | None = None

    @property
    def status(self) -> str:
        return str(self.resource["properties"]["status"])

    @property
    def props(self) -> dict[str, Any]:
        return self.resource["properties"]


class AzureMLService(FakeService):
    """Routes, stores and the life of a command job."""

    name = "azureml"

    def __init__(
        self,
        storage_connection_string: str | None = None,
        mode: str | None = None,
        region: str = "eastus",
        phase_seconds: float = 0.05,
        lro_retry_after: int = 1,
        computes: dict[str, str] | None = None,
        tmp_base: str | None = None,
        keep_workdirs: bool = False,
    ) -> None:
        super().__init__()
        self.conn_str = storage_connection_string or os.environ.get(
            "AZURE_STORAGE_CONNECTION_STRING"
        )
        self.runner = runner_mod.Runner(
            mode or os.environ.get("STEPOP_FAKE_MODE") or runner_mod.MODE_PROCESS,
            tmp_base=tmp_base,
        )
        self.region = region
        self.phase_seconds = float(phase_seconds)
        self.lro_retry_after = int(lro_retry_after)
        self.computes = dict(DEFAULT_COMPUTES if computes is None else computes)
        self.tmp_base = tmp_base
        self.keep_workdirs = keep_workdirs
        self.url = ""  # set by serve(): the fake's own base URL (discovery, log URLs)
        self.environments: dict[str, dict[str, Any]] = {}  # lower-cased id -> resource
        self.built_images: dict[str, str] = {}  # environment id -> image built from its context
        self.jobs: dict[str, AmlJob] = {}  # lower-cased id -> job
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        r = self.router
        r.add("GET", WS, "Workspaces_Get", self.get_workspace)
        env_v = rf"{WS}/environments/(?P<env>{_SEG})/versions"
        r.add(
            "PUT", rf"{env_v}/(?P<ver>{_SEG})", "EnvironmentVersions_CreateOrUpdate", self.put_env
        )
        r.add("GET", rf"{env_v}/(?P<ver>{_SEG})", "EnvironmentVersions_Get", self.get_env)
        r.add("GET", env_v, "EnvironmentVersions_List", self.list_envs)
        r.add("PUT", rf"{WS}/jobs/(?P<job>{_SEG})", "Jobs_CreateOrUpdate", self.put_job)
        r.add("GET", rf"{WS}/jobs/(?P<job>{_SEG})", "Jobs_Get", self.get_job)
        r.add("DELETE", rf"{WS}/jobs/(?P<job>{_SEG})", "Jobs_Delete", self.delete_job)
        r.add("GET", rf"{WS}/jobs", "Jobs_List", self.list_jobs)
        r.add("POST", rf"{WS}/jobs/(?P<job>{_SEG})/cancel", "Jobs_Cancel", self.cancel_job)
        r.add(
            "GET",
            rf"/subscriptions/(?P<sub>{_SEG})/providers/{PROVIDER}/locations/(?P<loc>{_SEG})/"
            rf"mfeOperationResults/(?P<op>{_SEG})",
            "OperationResults_Get",
            self.get_operation,
        )
        r.add("GET", rf"{WS}/datastores", "Datastores_List", self.list_datastores)
        r.add("GET", rf"{WS}/datastores/(?P<ds>{_SEG})", "Datastores_Get", self.get_datastore)
        r.add(
            "POST",
            rf"{WS}/datastores/(?P<ds>{_SEG})/listSecrets",
            "Datastores_ListSecrets",
            self.datastore_secrets,
        )
        r.add("GET", rf"{WS}/computes", "Compute_List", self.list_computes)
        r.add("GET", rf"{WS}/computes/(?P<compute>{_SEG})", "Compute_Get", self.get_compute)
        r.add("GET", rf"/discovery/workspaces/(?P<ws>{_SEG})", "Discovery", self.discovery)
        r.add(
            "GET",
            rf"/history/v1\.0{WS}(?:/experiments/{_SEG})?/runs/(?P<job>{_SEG})/details",
            "Runs_GetDetails",
            self.run_details,
        )
        r.add(
            "GET",
            rf"/_fake/azureml/logs/(?P<job>{_SEG})/(?P<path>.+)",
            "FakeLogFile",
            self.log_file,
        )
        r.add("GET", rf"/_fake/logs/(?P<job>{_SEG})", "FakeLogs", self.all_logs)
        self.tracking = Tracking()  # every job is an MLflow run (cloud.azureml_mlflow)
        self.tracking.add_routes(r, WS)

    # --- errors --------------------------------------------------------------------------
    def error_response(self, status: int, message: str, kind: str) -> Response:
        if kind == "throttle":
            return arm_error(
                429,
                "TooManyRequests",
                "The request is being throttled as the limit has been reached for operation type "
                "- Read_ObservationWindow_00:05:00. For more information, refer to - "
                "https://aka.ms/throttlingWindow",
                headers={"Retry-After": str((self.current_fault() or {}).get("retry_after", 1))},
            )
        if kind == "not_found":
            return arm_error(404, "ResourceNotFound", message)
        if kind == "error":
            code = "InternalServerError" if status == 500 else "ServiceUnavailable"
            return arm_error(
                status, code, f"The service encountered an error ({status}); retry the request."
            )
        return arm_error(status, "UserError", message)

    def dispatch(self, req: Request) -> Response:
        try:
            return super().dispatch(req)
        except ArmError as exc:
            return arm_error(exc.status, exc.code, exc.message, exc.inner)

    # --- ids and lookups -----------------------------------------------------------------
    @staticmethod
    def _ws_id(m: re.Match[str]) -> str:
        return (
            f"/subscriptions/{m['sub']}/resourceGroups/{m['rg']}/providers/{PROVIDER}/"
            f"workspaces/{m['ws']}"
        )

    @staticmethod
    def _system_data(created: float, modified: float | None = None) -> dict[str, Any]:
        return {
            "createdAt": rfc3339(created),
            "createdBy": "stepop-fake",
            "createdByType": "User",
            "lastModifiedAt": rfc3339(modified or created),
            "lastModifiedBy": "stepop-fake",
            "lastModifiedByType": "User",
        }

    def _find_job(self, m: re.Match[str]) -> AmlJob:
        key = f"{self._ws_id(m)}/jobs/{m['job']}".lower()
        with self._lock:
            job = self.jobs.get(key)
        if job is None:
            raise ArmError(
                404,
                "UserError",
                f"Could not find job with id '{m['job']}' in workspace '{m['ws']}'.",
                "NotFound",
            )
        return job

    # --- workspace, datastores, computes, discovery ---------------------------------------
    def get_workspace(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        ws_id = self._ws_id(m)
        return Response(
            200,
            {
                "id": ws_id,
                "name": m["ws"],
                "type": f"{PROVIDER}/workspaces",
                "location": self.region,
                "kind": "Default",
                "identity": {"type": "SystemAssigned"},
                "sku": {"name": "Basic", "tier": "Basic"},
                "properties": {
                    "friendlyName": m["ws"],
                    "workspaceId": str(uuid.uuid5(uuid.NAMESPACE_URL, ws_id.lower())),
                    "discoveryUrl": f"{req.base_url}/discovery/workspaces/{m['ws']}",
                    "mlFlowTrackingUri": f"azureml://{self.region}.api.azureml.ms/mlflow/v1.0"
                    f"{ws_id}",
                    "storageAccount": f"/subscriptions/{m['sub']}/resourceGroups/{m['rg']}/"
                    f"providers/Microsoft.Storage/storageAccounts/{AZURITE_ACCOUNT}",
                    "provisioningState": "Succeeded",
                    "publicNetworkAccess": "Enabled",
                },
                "systemData": self._system_data(0),
            },
        )

    def discovery(self, req: Request) -> Response:
        return Response(
            200,
            {
                "api": req.base_url,
                "catalog": req.base_url,
                "experimentation": req.base_url,
                "gallery": req.base_url,
                "history": req.base_url,
                "hyperdrive": req.base_url,
                "labeling": req.base_url,
                "modelmanagement": req.base_url,
                "pipelines": req.base_url,
                "studiometadata": req.base_url,
            },
        )

    def _datastore(self, m: re.Match[str], name: str) -> dict[str, Any]:
        container = DATASTORES[name]
        return {
            "id": f"{self._ws_id(m)}/datastores/{name}",
            "name": name,
            "type": f"{PROVIDER}/workspaces/datastores",
            "properties": {
                "datastoreType": "AzureBlob",
                "accountName": AZURITE_ACCOUNT,
                "containerName": container,
                "endpoint": "core.windows.net",
                "protocol": "https",
                "isDefault": name == DEFAULT_DATASTORE,
                "credentials": {"credentialsType": "AccountKey"},
                "serviceDataAccessAuthIdentity": "WorkspaceSystemAssignedIdentity",
                "tags": {},
                "properties": {},
            },
            "systemData": self._system_data(0),
        }

    def list_datastores(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        names = list(DATASTORES)
        if (req.arg("isDefault") or "").lower() == "true":
            names = [DEFAULT_DATASTORE]
        return Response(200, {"value": [self._datastore(m, n) for n in names]})

    def get_datastore(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        if m["ds"] not in DATASTORES:
            raise ArmError(404, "UserError", f"Datastore '{m['ds']}' not found.", "NotFound")
        return Response(200, self._datastore(m, m["ds"]))

    def datastore_secrets(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        if m["ds"] not in DATASTORES:
            raise ArmError(404, "UserError", f"Datastore '{m['ds']}' not found.", "NotFound")
        key = ""
        for part in (self.conn_str or "").split(";"):
            if part.startswith("AccountKey="):
                key = part[len("AccountKey=") :]
        return Response(200, {"secretsType": "AccountKey", "key": key})

    def _compute(self, m: re.Match[str], name: str) -> dict[str, Any]:
        return {
            "id": f"{self._ws_id(m)}/computes/{name}",
            "name": name,
            "type": f"{PROVIDER}/workspaces/computes",
            "location": self.region,
            "properties": {
                "computeType": "AmlCompute",
                "computeLocation": self.region,
                "provisioningState": "Succeeded",
                "properties": {
                    "vmSize": self.computes[name],
                    "vmPriority": "Dedicated",
                    "scaleSettings": {"minNodeCount": 0, "maxNodeCount": 4},
                },
            },
        }

    def list_computes(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        return Response(200, {"value": [self._compute(m, n) for n in self.computes]})

    def get_compute(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        if m["compute"] not in self.computes:
            raise ArmError(404, "ResourceNotFound", f"Compute '{m['compute']}' was not found.")
        return Response(200, self._compute(m, m["compute"]))

    # --- environments --------------------------------------------------------------------
    def put_env(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        if not ASSET_NAME.match(m["env"]):
            raise bad(
                f"Environment name '{m['env']}' is invalid: use letters, digits, '-', '_' and '.', "
                "starting with a letter or digit, at most 255 characters."
            )
        body = _json(req)
        props = body.get("properties")
        if not isinstance(props, dict):
            raise invalid("The request body must contain 'properties'.")
        if not props.get("image") and not props.get("build"):
            raise bad("An environment needs either 'image' or 'build'.")
        build = props.get("build")
        if build:
            if props.get("image"):
                raise bad("An environment has either 'image' or 'build', not both.")
            try:
                parse_uri(str(build.get("contextUri") or ""), DATASTORES)
            except ValueError as exc:
                raise bad(f"build.contextUri: {exc}") from exc
        image = props.get("image")
        if image is not None and (
            not re.match(r"^[a-z0-9][a-z0-9._\-/:@]*$", image, re.IGNORECASE) or " " in image
        ):
            raise bad(f"Image '{image}' is not a valid image reference.")
        env_id = f"{self._ws_id(m)}/environments/{m['env']}/versions/{m['ver']}"
        now = time.time()
        with self._lock:
            existing = self.environments.get(env_id.lower())
            if existing is not None and (
                existing["properties"].get("image") != image
                or existing["properties"].get("build") != build
            ):
                raise bad(
                    f"Environment {m['env']}:{m['ver']} already exists with a different image "
                    "or build; environment versions are immutable.",
                    "Conflict",
                )
            resource = existing or {
                "id": env_id,
                "name": m["ver"],
                "type": f"{PROVIDER}/workspaces/environments/versions",
                "properties": {
                    **props,
                    "environmentType": "UserCreated",
                    "osType": props.get("osType") or "Linux",
                    "autoRebuild": props.get("autoRebuild") or "OnBaseImageUpdate",
                    "provisioningState": "Succeeded",
                    "stage": props.get("stage") or "Development",
                },
                "systemData": self._system_data(now),
            }
            self.environments[env_id.lower()] = resource
        return Response(201 if existing is None else 200, resource)

    def get_env(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        env_id = f"{self._ws_id(m)}/environments/{m['env']}/versions/{m['ver']}"
        with self._lock:
            resource = self.environments.get(env_id.lower())
        if resource is None:
            raise ArmError(
                404, "UserError", f"Environment {m['env']}:{m['ver']} not found.", "NotFound"
            )
        return Response(200, resource)

    def list_envs(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        prefix = f"{self._ws_id(m)}/environments/{m['env']}/versions/".lower()
        with self._lock:
            found = [r for k, r in self.environments.items() if k.startswith(prefix)]
        return Response(200, {"value": found})

    def _resolve_env(self, env_ref: str) -> dict[str, Any]:
        ref = env_ref.removeprefix("azureml:")
        with self._lock:
            resource = self.environments.get(ref.lower())
        if resource is None:
            raise bad(
                f"Environment '{env_ref}' was not found in the workspace; create the environment "
                "version first.",
                "NotFound",
            )
        return resource

    # --- jobs ----------------------------------------------------------------------------
    def _validate_job(self, m: re.Match[str], props: dict[str, Any]) -> None:
        job_type = props.get("jobType")
        if not job_type:
            raise invalid("The field 'jobType' is required.")
        if job_type not in JOB_TYPES:
            raise invalid(f"Invalid jobType '{job_type}'. Allowed values: {', '.join(JOB_TYPES)}.")
        if job_type != "Command":
            raise ArmError(
                400,
                "UserError",
                f"Job type {job_type} is not supported by the fake.",
                "NotSupported",
            )
        if not (props.get("command") or "").strip():
            raise invalid("The field 'command' is required for a Command job.")
        if not props.get("environmentId"):
            raise invalid("The field 'environmentId' is required for a Command job.")
        exp = props.get("experimentName")
        if exp is not None and not EXPERIMENT_NAME.match(exp):
            raise bad(
                f"Experiment name '{exp}' is invalid: use letters, digits, '-' and '_', starting "
                "with a letter or digit, at most 255 characters."
            )
        display = props.get("displayName")
        if display is not None and len(display) > 256:
            raise bad("Display name must be at most 256 characters long.")
        compute = props.get("computeId")
        resources = props.get("resources") or {}
        if compute:
            cname = compute.rstrip("/").rsplit("/", 1)[-1]
            if cname not in self.computes:
                raise bad(f"Compute '{cname}' does not exist in workspace '{m['ws']}'.", "NotFound")
        itype = resources.get("instanceType")
        if itype is not None:
            canonical = canonical_instance_type(itype)
            if canonical is None:
                raise bad(
                    f"The specified instance type '{itype}' is not supported for serverless "
                    f"compute in region {self.region}. Choose a supported VM size such as "
                    "Standard_DS3_v2 or Standard_NC6s_v3.",
                    "InvalidInstanceType",
                )
            resources["instanceType"] = canonical
        count = resources.get("instanceCount", 1)
        if not isinstance(count, int) or count < 1:
            raise bad(f"instanceCount must be a positive integer, got {count!r}.")
        dist = props.get("distribution")
        if dist:
            dtype = dist.get("distributionType")
            if dtype not in DISTRIBUTIONS:
                raise invalid(
                    f"Invalid distributionType '{dtype}'. "
                    f"Allowed values: {', '.join(DISTRIBUTIONS)}."
                )
            pcount = dist.get("processCountPerInstance", 1)
            if pcount is not None and (not isinstance(pcount, int) or pcount < 1):
                raise bad(f"processCountPerInstance must be a positive integer, got {pcount!r}.")
        tier = (props.get("queueSettings") or {}).get("jobTier")
        if tier is not None and tier not in JOB_TIERS:
            raise invalid(f"Invalid jobTier '{tier}'. Allowed values: {', '.join(JOB_TIERS)}.")
        timeout = (props.get("limits") or {}).get("timeout")
        if timeout is not None and not _ISO_DURATION.match(str(timeout)):
            raise invalid(f"Invalid limits.timeout '{timeout}': use an ISO 8601 duration (PT1H).")
        for key, val in (props.get("environmentVariables") or {}).items():
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
                raise bad(f"Environment variable name '{key}' is invalid.")
            if not isinstance(val, str):
                raise invalid(f"Environment variable '{key}' must be a string.")
        inputs = props.get("inputs") or {}
        outputs = props.get("outputs") or {}
        for name, spec in inputs.items():
            itype_ = spec.get("jobInputType")
            if itype_ not in INPUT_TYPES:
                raise invalid(f"Input '{name}': invalid jobInputType '{itype_}'.")
            mode = spec.get("mode")
            if mode is not None and mode not in INPUT_MODES:
                raise invalid(f"Input '{name}': invalid mode '{mode}'.")
            if itype_ != "literal" and not spec.get("uri"):
                raise invalid(f"Input '{name}': 'uri' is required.")
            if itype_ in ("uri_folder", "uri_file"):
                try:
                    parse_uri(spec["uri"], DATASTORES)
                except ValueError as exc:
                    raise bad(f"Input '{name}': {exc}") from exc
        for name, spec in outputs.items():
            otype = spec.get("jobOutputType")
            if otype not in OUTPUT_TYPES:
                raise invalid(f"Output '{name}': invalid jobOutputType '{otype}'.")
            mode = spec.get("mode")
            if mode is not None and mode not in OUTPUT_MODES:
                raise invalid(f"Output '{name}': invalid mode '{mode}'.")
            if spec.get("uri"):
                try:
                    parse_uri(spec["uri"], DATASTORES)
                except ValueError as exc:
                    raise bad(f"Output '{name}': {exc}") from exc
        for kind, ref in _PLACEHOLDER.findall(props["command"]):
            if ref not in (inputs if kind == "inputs" else outputs):
                raise bad(
                    f"The command refers to ${{{{{kind}.{ref}}}}} but the job defines no "
                    f"{kind[:-1]} named '{ref}'."
                )

    def put_job(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        name = m["job"]
        if not JOB_NAME.match(name):
            raise bad(
                f"Job name '{name}' is invalid: it may contain only letters, digits, '-' and '_', "
                "must start with a letter or digit and be at most 255 characters long."
            )
        body = _json(req)
        props = body.get("properties")
        if not isinstance(props, dict):
            raise invalid("The request body must contain 'properties'.")
        job_id = f"{self._ws_id(m)}/jobs/{name}"
        with self._lock:
            existing = self.jobs.get(job_id.lower())
        if existing is not None:
            return self._update_job(existing, props)
        self._validate_job(m, props)
        self._resolve_env(props["environmentId"])
        now = time.time()
        props = json.loads(json.dumps(props))
        props.setdefault("displayName", name)
        props.setdefault("experimentName", "Default")
        props.setdefault("isArchived", False)
        props.setdefault("tags", {})
        props.setdefault("properties", {})
        props.setdefault("computeId", None)
        props["status"] = "NotStarted"
        for oname, spec in (props.get("outputs") or {}).items():
            if not spec.get("uri"):
                spec["uri"] = (
                    f"azureml://datastores/{DEFAULT_DATASTORE}/paths/azureml/{name}/{oname}/"
                )
            spec.setdefault("mode", "ReadWriteMount")
        for spec in (props.get("inputs") or {}).values():
            if spec.get("jobInputType") != "literal":
                spec.setdefault("mode", "ReadOnlyMount")
        props["services"] = {
            "Tracking": {
                "jobServiceType": "Tracking",
                "endpoint": f"azureml://{self.region}.api.azureml.ms/mlflow/v1.0{self._ws_id(m)}",
            },
            "Studio": {
                "jobServiceType": "Studio",
                "endpoint": f"{req.base_url}/_fake/logs/{name}",
            },
        }
        resource = {
            "id": job_id,
            "name": name,
            "type": f"{PROVIDER}/workspaces/jobs",
            "properties": props,
            "systemData": self._system_data(now),
        }
        job = AmlJob(resource, m["sub"], m["rg"], m["ws"], name, created=now)
        with self._lock:
            if job_id.lower() in self.jobs:  # a concurrent PUT won
                return self._update_job(self.jobs[job_id.lower()], props)
            self.jobs[job_id.lower()] = job
            self.tracking.create_run(
                self._ws_id(m), name, props["experimentName"], props["displayName"]
            )
        job.thread = threading.Thread(
            target=self._lifecycle, args=(job,), name=f"azureml-{name}", daemon=True
        )
        job.thread.start()
        return Response(201, self._render(job))

    def _update_job(self, job: AmlJob, props: dict[str, Any]) -> Response:
        """A PUT on an existing job may change only tags, displayName and description."""
        mutable = {"tags", "displayName", "description", "isArchived"}
        with self._lock:
            current = job.props
            for key, val in props.items():
                if key in mutable or key in ("status", "services"):
                    continue
                if val is None or key in ("properties",):
                    continue
                if current.get(key) != val and not _same_output_defaults(key, current, val):
                    raise bad(
                        f"A job named '{job.name}' already exists; its '{key}' cannot be changed. "
                        "Use a new job name to submit a different job.",
                        "Conflict",
                    )
            for key in mutable:
                if props.get(key) is not None:
                    current[key] = props[key]
            job.resource["systemData"]["lastModifiedAt"] = rfc3339(time.time())
            return Response(200, self._render(job))

    def _render(self, job: AmlJob) -> dict[str, Any]:
        with self._lock:
            return json.loads(json.dumps(job.resource))

    def get_job(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        return Response(200, self._render(self._find_job(m)))

    def list_jobs(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        prefix = f"{self._ws_id(m)}/jobs/".lower()
        view = (req.arg("listViewType") or "ActiveOnly").lower()
        tag = req.arg("tag")
        with self._lock:
            jobs = [j for k, j in self.jobs.items() if k.startswith(prefix)]
        if view == "activeonly":
            jobs = [j for j in jobs if not j.props.get("isArchived")]
        elif view == "archivedonly":
            jobs = [j for j in jobs if j.props.get("isArchived")]
        if tag:
            jobs = [j for j in jobs if tag in (j.props.get("tags") or {})]
        jobs.sort(key=lambda j: j.created, reverse=True)
        start = int(req.arg("$skipToken") or 0)
        size = 100
        page = jobs[start : start + size]
        body: dict[str, Any] = {"value": [self._render(j) for j in page]}
        if start + size < len(jobs):
            body["nextLink"] = (
                f"{req.base_url}{req.path}?api-version={req.arg('api-version')}"
                f"&$skipToken={start + size}"
            )
        return Response(200, body)

    def delete_job(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        job = self._find_job(m)
        if job.status not in TERMINAL:
            raise bad(
                f"Job '{job.name}' is {job.status}; cancel it before deleting it.", "Conflict"
            )
        with self._lock:
            self.jobs.pop(job.resource["id"].lower(), None)
        return Response(200, None)

    def cancel_job(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        job = self._find_job(m)
        with self._lock:
            if job.status not in TERMINAL and job.status != "CancelRequested":
                self._set_status(job, "CancelRequested")
            job.cancel.set()
        op = f"jc:{uuid.uuid4()}:{job.resource['id'].replace('/', '~')}"
        location = (
            f"{req.base_url}/subscriptions/{m['sub']}/providers/{PROVIDER}/locations/{self.region}/"
            f"mfeOperationResults/{op}?api-version={req.arg('api-version') or '2023-04-01'}"
        )
        return Response(
            202, None, headers={"Location": location, "Retry-After": str(self.lro_retry_after)}
        )

    def get_operation(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        parts = m["op"].split(":", 2)
        if len(parts) != 3 or parts[0] != "jc":
            raise ArmError(404, "ResourceNotFound", f"Operation '{m['op']}' not found.")
        job_id = parts[2].replace("~", "/")
        with self._lock:
            job = self.jobs.get(job_id.lower())
        if job is None or job.status in TERMINAL:
            return Response(200, None)
        return Response(202, None, headers={"Location": f"{req.base_url}{req.path}?api-version="
                                            f"{req.arg('api-version')}",
                                            "Retry-After": str(self.lro_retry_after)})  # fmt: skip

    # --- run history and logs ------------------------------------------------------------
    def _log_files(self, job: AmlJob, base: str) -> dict[str, str]:
        now = time.time()
        with self._lock:
            files = sorted({ln.file for ln in job.logs if ln.visible_at <= now})
        return {f: f"{base}/_fake/azureml/logs/{job.name}/{f}" for f in files}

    def run_details(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        job = self._find_job(m)
        with self._lock:
            props = job.props
            body: dict[str, Any] = {
                "runId": job.name,
                "runUuid": str(uuid.uuid5(uuid.NAMESPACE_URL, job.resource["id"])),
                "status": props["status"],
                "target": (props.get("computeId") or "serverless").rsplit("/", 1)[-1],
                "createdTimeUtc": rfc3339(job.created),
                "startTimeUtc": rfc3339(job.started),
                "endTimeUtc": rfc3339(job.ended),
                "tags": props.get("tags") or {},
                "properties": props.get("properties") or {},
                "logFiles": self._log_files(job, req.base_url),
                "warnings": [],
            }
            if job.error is not None:
                body["error"] = {"error": job.error, "time": rfc3339(job.ended)}
        return Response(200, body)

    def _visible(self, job: AmlJob, path: str | None = None) -> list[LogLine]:
        now = time.time()
        with self._lock:
            return [
                ln for ln in job.logs if ln.visible_at <= now and (path is None or ln.file == path)
            ]

    def _job_by_name(self, name: str) -> AmlJob:
        with self._lock:
            found = [j for j in self.jobs.values() if j.name == name]
        if not found:
            raise ArmError(404, "ResourceNotFound", f"No job named '{name}'.")
        return found[0]

    def log_file(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        job = self._job_by_name(m["job"])
        text = "".join(ln.text + "\n" for ln in self._visible(job, m["path"]))
        return Response(200, raw=text.encode(), content_type="text/plain; charset=utf-8")

    def all_logs(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        job = self._job_by_name(m["job"])
        text = "".join(ln.text + "\n" for ln in self._visible(job))
        return Response(200, raw=text.encode(), content_type="text/plain; charset=utf-8")

    def _log(self, job: AmlJob, file: str, text: str, ts: float | None = None) -> None:
        ts = ts or time.time()
        delay = self.faults.seconds("log_delay")
        with self._lock:
            job.logs.append(LogLine(ts, ts + delay, file, text))

    # --- the job's life ------------------------------------------------------------------
    def _set_status(self, job: AmlJob, status: str) -> None:
        with self._lock:
            now = time.time()
            job.props["status"] = status
            job.resource["systemData"]["lastModifiedAt"] = rfc3339(now)
            if status == "Running" and job.started is None:
                job.started = now
            if status in TERMINAL:
                job.ended = now

    def _fail(self, job: AmlJob, code: str, message: str) -> None:
        with self._lock:
            job.error = {"code": code, "message": message, "details": []}
        self._set_status(job, "Failed")

    def _wait(self, job: AmlJob, seconds: float) -> bool:
        return job.cancel.wait(max(0.0, seconds)) or self._stopping.is_set()

    def _lifecycle(self, job: AmlJob) -> None:
        workdir = None
        try:
            for status in ("Starting", "Preparing", "Queued"):
                if job.status == "CancelRequested" or self._wait(job, self.phase_seconds):
                    return self._set_status(job, "Canceled")
                self._set_status(job, status)
                if status == "Preparing":
                    extra = self.faults.seconds("provisioning_delay")
                    if extra and self._wait(job, extra):
                        return self._set_status(job, "Canceled")
            failure = self.faults.take_job_fault("job_failure", job.name)
            if failure is not None:
                code = str(failure.get("code") or "ServiceError")
                reason = str(failure.get("reason") or "The compute could not be allocated.")
                status = failure.get("status") or "Failed"
                if status in STUCK:
                    with self._lock:
                        job.error = {"code": code, "message": reason, "details": []}
                    self._set_status(job, status)
                    while not self._wait(job, 3600):
                        pass
                    return self._set_status(job, "Canceled")
                return self._fail(job, code, reason)
            workdir = tempfile.mkdtemp(prefix=f"stepop-azureml-{job.name[:40]}-", dir=self.tmp_base)
            self._run(job, workdir)
        except Exception as exc:  # the fake's own bug: fail the job visibly
            self._log(job, "system_logs/fake.txt", f"fake internal error: {exc!r}")
            self._fail(job, "SystemError", f"Internal error in the fake: {exc!r}")
        finally:
            for run in job.runs:
                self.runner.forget(run)
                if not self.keep_workdirs:
                    run.cleanup()
            if workdir and not self.keep_workdirs:
                shutil.rmtree(workdir, ignore_errors=True)

    def _container_paths(self, job: AmlJob) -> tuple[str, str]:
        base = f"/mnt/azureml/cr/j/{uuid.uuid5(uuid.NAMESPACE_URL, job.resource['id']).hex}"
        return f"{base}/cap/data-capability/wd", f"{base}/exe/wd"

    def _run(self, job: AmlJob, workdir: str) -> None:
        props = job.props
        cap, exe = self._container_paths(job)
        cap_host = os.path.join(workdir, "cap")
        exe_host = os.path.join(workdir, "exe")
        os.makedirs(cap_host, exist_ok=True)
        os.makedirs(exe_host, exist_ok=True)
        service = blob_service(self.conn_str) if self.conn_str else None
        values: dict[tuple[str, str], str] = {}
        env: dict[str, str] = {}
        # inputs: copied down before the start
        for name, spec in (props.get("inputs") or {}).items():
            if spec["jobInputType"] == "literal":
                values[("inputs", name)] = str(spec.get("value", ""))
                continue
            if spec.get("mode") == "Direct":  # the job gets the URI and reads storage itself
                values[("inputs", name)] = spec["uri"]
                env[f"AZURE_ML_INPUT_{name}"] = spec["uri"]
                continue
            is_file = spec["jobInputType"] == "uri_file"
            container, path = parse_uri(spec["uri"], DATASTORES)
            rel = f"INPUT_{name}"
            target = os.path.join(cap_host, rel)
            cpath = f"{cap}/{rel}"
            if is_file:
                fname = path.rsplit("/", 1)[-1]
                target = os.path.join(target, fname)
                cpath = f"{cpath}/{fname}"
            if service is None:
                return self._fail(job, "UserError", "No storage is configured for this fake.")
            try:
                download(service, container, path, target, is_file)
            except FileNotFoundError:
                return self._fail(
                    job,
                    "UserError",
                    f"Failed to download input '{name}': no data found at '{spec['uri']}'. "
                    "Make sure the path exists in the datastore.",
                )
            values[("inputs", name)] = cpath
            env[f"AZURE_ML_INPUT_{name}"] = cpath
        outputs: dict[str, tuple[str, str]] = {}
        for name, spec in (props.get("outputs") or {}).items():
            if spec.get("mode") == "Direct":
                values[("outputs", name)] = spec["uri"]
                env[f"AZURE_ML_OUTPUT_{name}"] = spec["uri"]
                continue
            host = os.path.join(cap_host, name)
            os.makedirs(host, exist_ok=True)
            if spec.get("mode") == "ReadWriteMount" and service is not None:
                # a read-write mount shows what the datastore already holds there
                container, path = parse_uri(spec["uri"], DATASTORES)
                with contextlib.suppress(FileNotFoundError):
                    download(service, container, path, host, False)
            values[("outputs", name)] = f"{cap}/{name}"
            env[f"AZURE_ML_OUTPUT_{name}"] = f"{cap}/{name}"
            outputs[name] = (host, spec["uri"])
        command = _PLACEHOLDER.sub(lambda mm: values[(mm.group(1), mm.group(2))], props["command"])
        env.update(
            AZUREML_RUN_ID=job.name,
            AZUREML_ARM_SUBSCRIPTION=job.sub,
            AZUREML_ARM_RESOURCEGROUP=job.rg,
            AZUREML_ARM_WORKSPACE_NAME=job.ws,
            AZUREML_ARM_PROJECT_NAME=props.get("experimentName") or "Default",
            AZUREML_EXPERIMENT_NAME=props.get("experimentName") or "Default",
            AZUREML_SERVICE_ENDPOINT=self.url,
            AZUREML_CR_EXECUTION_WORKING_DIR_PATH=exe,
            AZUREML_CR_DATA_CAPABILITY_PATH=cap,
        )
        ws_id = job.resource["id"].rsplit("/jobs/", 1)[0]
        env.update(self.tracking.job_environment(self.url, ws_id, job.name))
        env.update(props.get("environmentVariables") or {})
        environment = self._resolve_env(props["environmentId"])
        image = environment["properties"].get("image") or ""
        if environment["properties"].get("build"):
            built = self._build_image(job, environment, service)
            if built is None:
                return None  # the job failed with the build's error
            image = built
        tier = (props.get("queueSettings") or {}).get("jobTier")
        try:
            while True:
                outcome = self._run_once(
                    job, workdir, image, command, env, cap, cap_host, exe, exe_host
                )
                if outcome != "preempted":
                    break
                self._log(job, "system_logs/lifecycler.txt", "Job preempted (low priority).")
                if tier != "Spot":
                    job.final = (
                        "Failed",
                        {
                            "code": "ServiceError",
                            "message": "The job was preempted and could not be resumed.",
                        },
                    )
                    break
                self._set_status(job, "Queued")
                if self._wait(job, self.phase_seconds):
                    job.final = ("Canceled", None)
                    break
        finally:
            if job.final is None or job.final[0] != "Canceled":
                self._set_status(job, "Finalizing")
            self._finalize(job, service, outputs)

    def _build_image(self, job: AmlJob, environment: dict[str, Any], service: Any) -> str | None:
        """An environment with a build context: the image Azure ML builds in its own registry.

        Container mode builds the context with the local engine (``network_mode`` host, as the
        test engine has no bridge network) and pushes it to ``STEPOP_REGISTRY``; the build log
        is ``system_logs/image_build.txt``. A process-mode job runs no image, so nothing is
        built. Built images are reused by environment version. None: the job failed.
        """
        mode = (job.props.get("tags") or {}).get("stepop_fake_mode") or self.runner.mode
        log_file = "system_logs/image_build.txt"
        if mode != runner_mod.MODE_CONTAINER:
            self._log(job, log_file, "process mode: the build context is not built")
            return ""
        env_id = environment["id"].lower()
        with self._lock:
            if env_id in self.built_images:
                return self.built_images[env_id]
        build = environment["properties"]["build"]
        registry = os.environ.get("STEPOP_REGISTRY", "127.0.0.1:5000")
        name, version = env_id.split("/environments/")[1].split("/versions/")
        tag = f"{registry}/azureml/{name}:{version}"
        context = tempfile.mkdtemp(prefix="stepop-azureml-build-", dir=self.tmp_base)
        try:
            if service is None:
                raise RuntimeError("no storage is configured for this fake")
            container, path = parse_uri(build["contextUri"], DATASTORES)
            download(service, container, path, context, False)
            client = self.runner.docker()
            for chunk in client.api.build(
                path=context, dockerfile=build.get("dockerfilePath") or "Dockerfile", tag=tag,
                network_mode="host", rm=True, decode=True,
            ):  # fmt: skip
                if "error" in chunk:
                    raise RuntimeError(chunk["error"].strip())
                for line in str(chunk.get("stream", "")).splitlines():
                    if line.strip():
                        self._log(job, log_file, line)
            repo, _, tag_name = tag.rpartition(":")
            for chunk in client.images.push(repo, tag=tag_name, stream=True, decode=True):
                if "error" in chunk:
                    raise RuntimeError(chunk["error"].strip())
        except Exception as exc:
            self._log(job, log_file, f"image build failed: {exc}")
            self._fail(job, "ImageBuildFailure", f"Building the environment's image failed: {exc}")
            return None
        finally:
            shutil.rmtree(context, ignore_errors=True)
        with self._lock:
            self.built_images[env_id] = tag
        return tag

    def _finalize(self, job: AmlJob, service: Any, outputs: dict[str, tuple[str, str]]) -> None:
        final, job.final = job.final, None
        if service is not None:
            for name, (host, uri) in outputs.items():
                try:
                    container, path = parse_uri(uri, DATASTORES)
                    upload(service, container, path, host)
                except Exception as exc:
                    self._log(job, "system_logs/data_capability.txt", f"upload of {name}: {exc!r}")
                    if final is not None and final[0] == "Completed":
                        msg = f"Failed to upload output '{name}': {exc}"
                        final = ("Failed", {"code": "UserError", "message": msg})
            by_file: dict[str, list[str]] = {}
            with self._lock:
                for ln in job.logs:
                    by_file.setdefault(ln.file, []).append(ln.text)
            for fname, lines in by_file.items():
                try:
                    upload_text(
                        service,
                        DATASTORES["workspaceartifactstore"],
                        f"ExperimentRun/dcid.{job.name}/{fname}",
                        "".join(line + "\n" for line in lines),
                    )
                except Exception as exc:
                    print(f"[azureml] log upload failed: {exc!r}", file=sys.stderr)
        if final is None:
            final = (
                "Failed",
                {"code": "SystemError", "message": "The job ended without a status."},
            )
        status, error = final
        if error is not None:
            self._fail(job, error["code"], error["message"])
        else:
            self._set_status(job, status)

    def _run_once(
        self,
        job: AmlJob,
        workdir: str,
        image: str,
        command: str,
        env: dict[str, str],
        cap: str,
        cap_host: str,
        exe: str,
        exe_host: str,
    ) -> str:
        props = job.props
        resources = props.get("resources") or {}
        instances = int(resources.get("instanceCount") or 1)
        dist = props.get("distribution") or {}
        per_node = int(dist.get("processCountPerInstance") or 1) if dist else 1
        world = instances * per_node
        master_port = str(_free_port())
        nodes = []
        for node_rank in range(instances):
            for local in range(per_node):
                rank = node_rank * per_node + local
                node_env = {
                    "RANK": str(rank),
                    "LOCAL_RANK": str(local),
                    "NODE_RANK": str(node_rank),
                    "WORLD_SIZE": str(world),
                    "LOCAL_WORLD_SIZE": str(per_node),
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": master_port,
                    "AZUREML_NODE_COUNT": str(instances),
                }
                nodes.append(
                    runner_mod.NodeSpec(f"node-{node_rank}-{local}", rank=rank, env=node_env)
                )
        tags = props.get("tags") or {}
        mode = tags.get("stepop_fake_mode") or self.runner.mode
        launch_env = dict(env)
        if mode == runner_mod.MODE_PROCESS:
            launch_env["PATH"] = os.pathsep.join(
                [os.path.dirname(sys.executable), os.environ.get("PATH", "/usr/bin:/bin")]
            )
        launch = runner_mod.JobLaunch(
            fake="azureml",
            name=job.name,
            image=image,
            entrypoint=["/bin/bash", "-c"],
            args=[command],
            env=launch_env,
            mounts=[runner_mod.Mount(cap_host, cap), runner_mod.Mount(exe_host, exe)],
            workdir=exe,
            nodes=nodes,
            labels={"stepop.azureml.job": job.name},
        )
        single = world == 1

        def sink(node: runner_mod.NodeSpec, stream: str, line: str, ts: float) -> None:
            fname = (
                "user_logs/std_log.txt" if single else f"user_logs/std_log_process_{node.rank}.txt"
            )
            self._log(job, fname, line, ts)

        run_dir = os.path.join(workdir, "runs", str(len(job.runs)))
        os.makedirs(run_dir, exist_ok=True)
        try:
            run = self.runner.launch(launch, on_line=sink, mode=mode, workdir=run_dir)
        except runner_mod.LaunchError as exc:
            job.final = (
                "Failed",
                {"code": "UserError", "message": f"Failed to start the job's container: {exc}"},
            )
            return "done"
        job.runs.append(run)
        self._set_status(job, "Running")
        started = time.monotonic()
        timeout = _iso_seconds((props.get("limits") or {}).get("timeout"))
        preempt = self.faults.take_job_fault("preempt", job.name)
        preempt_at = started + float(preempt.get("after_seconds", 0.5)) if preempt else None
        while True:
            code = run.result()
            if code is not None:
                if code == 0:
                    job.final = ("Completed", None)
                else:
                    tail = [ln.text for ln in job.logs if ln.file.startswith("user_logs/")][-5:]
                    job.final = (
                        "Failed",
                        {
                            "code": "UserError",
                            "message": "Execution failed. User process '/bin/bash' exited with "
                            f"status code {code}. Please check log file 'user_logs/std_log.txt' "
                            "for error details. Error: " + "\n".join(tail),
                        },
                    )
                return "done"
            if job.cancel.is_set() or self._stopping.is_set():
                run.stop(grace=5)
                job.final = ("Canceled", None)
                return "cancelled"
            now = time.monotonic()
            if preempt_at is not None and now >= preempt_at:
                run.stop(grace=2)
                return "preempted"
            if timeout is not None and now - started > timeout:
                run.stop(grace=2)
                job.final = (
                    "Failed",
                    {
                        "code": "UserError",
                        "message": f"The job exceeded its limits.timeout of {timeout:g} seconds "
                        "and was canceled.",
                    },
                )
                return "done"
            job.cancel.wait(0.05)

    # --- state ---------------------------------------------------------------------------
    def _stop_jobs(self) -> None:
        with self._lock:
            alive = list(self.jobs.values())
        for job in alive:
            job.cancel.set()
        for job in alive:
            if job.thread is not None:
                job.thread.join(timeout=30)

    def reset(self, jobs: bool) -> None:
        if jobs:
            self._stop_jobs()
            with self._lock:
                self.jobs.clear()
                self.environments.clear()
            self.tracking.clear()

    def shutdown(self) -> None:
        self._stopping.set()
        self._stop_jobs()
        self.runner.stop_all(grace=2)


def _same_output_defaults(key: str, current: dict[str, Any], new: Any) -> bool:
    """A re-PUT of the same job differs only by what the service filled in (output URIs...)."""
    if key not in ("outputs", "inputs") or not isinstance(new, dict):
        return False
    old = current.get(key) or {}
    if set(old) != set(new):
        return False
    for name, spec in new.items():
        for field_name, val in spec.items():
            if val is not None and old[name].get(field_name) != val:
                return False
    return True


def _json(req: Request) -> dict[str, Any]:
    try:
        body = req.json()
    except ValueError as exc:
        raise invalid(f"The request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.")
    return body


def _iso_seconds(value: str | None) -> float | None:
    if not value:
        return None
    m = re.match(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$", str(value))
    if m is None:
        return None
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups())
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- entry points ------------------------------------------------------------------------------
def settings_from_env(env: dict[str, str]) -> dict[str, Any]:
    """Settings from the stack's env (``cloud.stack``): Azurite and the state directory."""
    settings: dict[str, Any] = {}
    if env.get("AZURE_STORAGE_CONNECTION_STRING"):
        settings["storage_connection_string"] = env["AZURE_STORAGE_CONNECTION_STRING"]
    if env.get("STEPOP_CLOUD_DIR"):
        jobs = os.path.join(env["STEPOP_CLOUD_DIR"], "jobs", "azureml")
        os.makedirs(jobs, exist_ok=True)
        settings["tmp_base"] = jobs
        settings["tls_dir"] = tls_dir_for(env["STEPOP_CLOUD_DIR"])
    if env.get("STEPOP_FAKE_MODE"):
        settings["mode"] = env["STEPOP_FAKE_MODE"]
    return settings


def tls_dir_for(state_dir: str) -> str:
    """Where the stack's fake keeps its self-signed certificate (cert.pem is the CA bundle)."""
    return os.path.join(state_dir, "tls", "azureml")


def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    env: dict[str, str] | None = None,
    **settings: Any,
) -> FakeServer:
    """Start the fake; returns the server (``.url``/``.https_url``/``.ca_bundle``/``.shutdown()``).

    The port speaks both HTTP and HTTPS (self-signed certificate in ``tls_dir``, a fresh
    temporary directory by default): MLClient needs https for its workspace and run-history
    calls. Without ``env`` it runs in background threads and returns at once (tests,
    scripts). With ``env`` (the ``python -m cloud.serve`` contract used by ``cloud.stack``)
    settings come from that env, explicit ``settings`` win, and the call blocks until
    SIGTERM/SIGINT.
    """
    merged = settings if env is None else {**settings_from_env(env), **settings}
    tls_dir = merged.pop("tls_dir", None) or tempfile.mkdtemp(prefix="stepop-azureml-tls-")
    service = AzureMLService(**merged)
    if service.conn_str:
        _create_datastore_containers(service.conn_str)
    server = FakeServer(service, host, port, tls_dir=tls_dir)
    service.url = server.url
    if env is not None:
        server.serve_until_interrupted()
    return server


def _create_datastore_containers(connection_string: str) -> None:
    """The workspace's datastore containers, as Azure creates them with the workspace."""
    from cloud.azureml_storage import ensure_container

    service = blob_service(connection_string)
    for container in DATASTORES.values():
        ensure_container(service, container)


SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
RESOURCE_GROUP = "stepop-rg"
WORKSPACE = "stepop-ws"


def stack_env(url: str, env: dict[str, str]) -> dict[str, str]:
    """Extra ``.cloud/env`` lines: https endpoint, CA bundle, workspace, an Azure ML connection."""
    https = url.replace("http://", "https://", 1)
    ca = os.path.join(tls_dir_for(env.get("STEPOP_CLOUD_DIR", ".cloud")), "cert.pem")
    conn = {
        "conn_type": "azure_ml",
        "extra": {
            "subscription_id": SUBSCRIPTION,
            "resource_group": RESOURCE_GROUP,
            "workspace_name": WORKSPACE,
            "endpoint": https,
            "ca_bundle": ca,
            "emulator_token": True,
        },
    }
    return {
        "STEPOP_AZUREML_HTTPS_ENDPOINT": https,
        "STEPOP_AZUREML_CA_BUNDLE": ca,
        "STEPOP_AZUREML_SUBSCRIPTION": SUBSCRIPTION,
        "STEPOP_AZUREML_RESOURCE_GROUP": RESOURCE_GROUP,
        "STEPOP_AZUREML_WORKSPACE": WORKSPACE,
        "AIRFLOW_CONN_AZUREML_DEFAULT": json.dumps(conn, separators=(",", ":")),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m cloud.azureml", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument(
        "--storage-connection-string", default=os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
    )
    parser.add_argument("--mode", choices=runner_mod.MODES, default=None)
    parser.add_argument("--phase-seconds", type=float, default=0.05)
    parser.add_argument("--lro-retry-after", type=int, default=1)
    parser.add_argument("--tmp-base", default=None)
    args = parser.parse_args(argv)
    server = serve(
        args.host,
        args.port,
        storage_connection_string=args.storage_connection_string,
        mode=args.mode,
        phase_seconds=args.phase_seconds,
        lro_retry_after=args.lro_retry_after,
        tmp_base=args.tmp_base,
    )
    print(f"azureml fake listening on {server.url}", flush=True)
    server.serve_until_interrupted()


if __name__ == "__main__":
    main()
