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
                                               with the local engine for the first job that
                                               uses it (log ``system_logs/image_build.txt``;
                                               a failed build fails the job with
                                               ``ImageBuildFailure``)
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
``GET /_fake/azureml/logs/{job}/{path}``       one log file (the ``logFiles`` URLs); a
                                               ``Range: bytes=a-[b]`` answers 206 or 416, as
                                               Blob Storage, where Azure's URLs point
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
on the fake's tracking server, :mod:`cloud.azureml.mlflow_tracking`), the job's
``environmentVariables`` and, per process, ``RANK``/``LOCAL_RANK``/``NODE_RANK``/
``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` (``resources.instanceCount`` x
``distribution.processCountPerInstance`` processes). Inputs are downloaded from Azurite before the
start and outputs uploaded after the exit (a ``ReadWriteMount`` output first shows what its path
already holds, as a mount would; see :mod:`cloud.azureml.storage`); an output without a path goes
to ``azureml://datastores/workspaceblobstore/paths/azureml/{job}/{output}/`` as Azure ML does. In
process mode (the plain base image only) ``python`` in the command is this virtualenv's
interpreter.

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
other tiers fail), ``log_delay``, and ``capacity`` (``{"kind": "capacity", "machine":
"Standard_NC6s_v3", "at": ..., "region": ..., "count": null}``: every job on that VM size, the
serverless ``resources.instanceType`` or the cluster's ``vmSize``, compared case-insensitively,
in the workspace's region if ``region`` is given, or the next ``count``):

* ``at: "queue"`` (the default), no VM of the size to allocate: the job reaches Queued and stays
  there, its run details ``warnings`` saying "Run requested N node(s). '<cluster>' cluster has
  encountered error(s). Instances of the specified VM size are not currently available. Please
  retry later, ..." (plus the low-priority sentence for a ``lowpri-`` cluster or a Spot job),
  until it is cancelled or, with the rule's ``seconds``, that long, after which it runs;
* ``at: "provision"``, the subscription's vCPU quota: the job fails from Queued (after the rule's
  ``seconds``, default 0) with run history ``error`` ``{"code": "UserError", "message": "Job
  submission to AzureML Compute encountered an Exception with status code
  JobNodeCountExceedsCoreQuota, The specified subscription has a vCPU quota of 0 for <size> and is
  less than the requested job node count of N. ..."}`` (``code`` and ``reason`` replace them).

Settings (``serve(**settings)`` / command line / env):

``storage_connection_string``  Azurite (env ``AZURE_STORAGE_CONNECTION_STRING``); without it
                      inputs cannot be resolved and outputs are dropped.
``mode``              ``process`` (default), ``container`` or ``timer`` (env
                      ``STEPOP_FAKE_MODE``; timer: see :mod:`cloud.runner`). Process mode
                      runs only the plain base image (``STEPOP_TEST_BASE_IMAGE``, by name or
                      by image ID: :mod:`cloud.runner.images`) as a local process; a job of any
                      other image, one the fake built from a build context included, runs in a
                      container, so it sees what was built. A job tagged
                      ``stepop_fake_mode: process|container|timer`` chooses its own.
``base_image``        the plain base image and the stack's registry
                      (:class:`cloud.runner.BaseImage`; default: ``STEPOP_TEST_BASE_IMAGE`` and
                      ``STEPOP_REGISTRY`` when each job starts); built images go there too.
``region``            the workspace location (``eastus``).
``phase_seconds``     time spent in each of Starting/Preparing/Queued (0.05 s).
``lro_retry_after``   ``Retry-After`` seconds on 202 answers (1; azure-core reads 0 as "use
                      its own polling_interval", 30 s by default, so keep it >= 1).
``computes``          named clusters ``{name: vm size}`` (``cpu-cluster``: Standard_DS3_v2,
                      ``gpu-cluster`` and ``lowpri-gpu-cluster``: Standard_NC6s_v3); a
                      ``lowpri-`` cluster has ``vmPriority`` LowPriority, the others Dedicated.
``tmp_base``          where per-job directories go.
``tls_dir``           where the self-signed certificate goes (``cert.pem`` is the CA bundle).
``max_page_size``     the most jobs one Jobs_List page holds (100, as the service);
                      ``POST /_fake/page_size {"size": n}`` lowers it until a reset.

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
import json
import os
import tempfile
from typing import Any

from cloud import runner as runner_mod
from cloud.azureml.arm import WS, ArmError, arm_error
from cloud.azureml.history import RunHistoryRoutes
from cloud.azureml.jobs import JobRoutes
from cloud.azureml.state import DATASTORES
from cloud.azureml.storage import blob_service, ensure_container
from cloud.azureml.workspace import WorkspaceRoutes
from cloud.fake_http import FakeServer, Request, Response


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


class AzureMLService(WorkspaceRoutes, JobRoutes, RunHistoryRoutes):
    """The fake: its parts' routes on one router, ARM's error shapes, reset and shutdown.

    The parts, each in its module: :class:`~cloud.azureml.workspace.WorkspaceRoutes` (workspace,
    discovery, datastores, computes), :class:`~cloud.azureml.jobs.JobRoutes` (jobs, built on
    :class:`~cloud.azureml.lifecycle.JobLifecycle` and
    :class:`~cloud.azureml.environments.EnvironmentRoutes`),
    :class:`~cloud.azureml.history.RunHistoryRoutes` (run details, log files) and the MLflow
    tracking server (:mod:`cloud.azureml.mlflow_tracking`). They share
    :class:`~cloud.azureml.state.AzureMLState`, whose settings this takes.
    """

    def __init__(self, **settings: Any) -> None:
        """The settings of :class:`~cloud.azureml.state.AzureMLState` (module docstring)."""
        super().__init__(**settings)
        self._add_workspace_routes()
        self._add_environment_routes()
        self._add_job_routes()
        self._add_history_routes()
        self.tracking.add_routes(self.router, WS)

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
    settings["base_image"] = runner_mod.BaseImage.from_env(env)  # process mode runs it only
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
    parser.add_argument("--tls-dir", default=None, help="its cert.pem is the CA bundle")
    parser.add_argument("--max-page-size", type=int, default=100)
    args = parser.parse_args(argv)
    server = serve(
        args.host,
        args.port,
        storage_connection_string=args.storage_connection_string,
        mode=args.mode,
        phase_seconds=args.phase_seconds,
        lro_retry_after=args.lro_retry_after,
        tmp_base=args.tmp_base,
        tls_dir=args.tls_dir,
        max_page_size=args.max_page_size,
    )
    print(f"azureml fake listening on {server.url}", flush=True)
    server.serve_until_interrupted()
