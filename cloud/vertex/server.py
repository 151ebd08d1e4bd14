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
                                                              pageToken, readMask; newest first)
``GET    /v1/projects/{p}/locations/{l}/customJobs/{id}``     GetCustomJob
``POST   /v1/projects/{p}/locations/{l}/customJobs/{id}:cancel``  CancelCustomJob
``DELETE /v1/projects/{p}/locations/{l}/customJobs/{id}``     DeleteCustomJob (a done LRO)
``POST|GET /v1/projects/{p}/locations/{l}/metadataStores/{s}/contexts[/{id}]``  CreateContext,
    GetContext: an Experiment to log to (:mod:`cloud.vertex.metadata`); a job naming an
    experiment needs ``serviceAccount`` and an existing context, as Vertex does
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
``/gcs/<bucket>`` is a copy, not a FUSE mount (see :mod:`cloud.vertex.gcs`): buckets named
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
AIP_CHECKPOINT_DIR -; otherwise it fails with code 14 UNAVAILABLE), ``log_delay``, and
``capacity`` (``{"kind": "capacity", "machine": "a2-highgpu-1g", "at": ..., "region": ...,
"count": null}``: every job with a worker pool on that ``machineType``, or that
``acceleratorType`` such as ``NVIDIA_TESLA_A100``, in that location, or the next ``count``):

* ``at: "provision"`` (the default), a stockout: the job is created, sits PENDING (its service
  log says "Resources are insufficient in region: <location>.") for the rule's ``seconds``
  (default 0) on top of any ``provisioning_delay``, then ends JOB_STATE_FAILED with ``error``
  ``{"code": 8, "message": "Resources are insufficient in region: <location>."}`` (``code`` and
  ``reason`` replace them), no ``startTime``; a FLEX_START job waits instead (below);
* ``at: "create"``, the project's quota: CreateCustomJob answers HTTP 429 RESOURCE_EXHAUSTED
  "The following quota metrics exceed quota limits: aiplatform.googleapis.com/<metric>" (the
  pool's GPUs' metric such as ``custom_model_training_nvidia_a100_gpus``, else
  ``custom_model_training_cpus``); no job is created, whatever its scheduling strategy.

Dynamic Workload Scheduler (:mod:`cloud.vertex.flex_start`): ``jobSpec.scheduling.strategy:
FLEX_START`` with ``scheduling.maxWaitDuration`` (a Duration; absent: ``"86400s"``, 1 day;
``"0s"``: no limit). CreateCustomJob refuses (400 INVALID_ARGUMENT, the field named) a worker pool
without a DWS GPU (``NVIDIA_L4``, ``NVIDIA_TESLA_A100``, ``NVIDIA_A100_80GB``,
``NVIDIA_H100_80GB``, ``NVIDIA_H100_MEGA_80GB``, ``NVIDIA_H200_141GB``, ``NVIDIA_B200``):
"Scheduling strategy FLEX_START requires a GPU accelerator in every worker pool, one of ...; got
<type or none>."; worker pools with different ``machineSpec``: "... requires the same
machine_spec in every worker pool; it differs from worker_pool_specs[0].machine_spec."; a
``scheduling.timeout`` over 7 days: "... allows a timeout of at most 7 days (604800s); got <t>.".
A FLEX_START job with no ``capacity`` rule at ``provision`` for its machine runs as any job. One
that meets such a rule does not fail: it stays JOB_STATE_PENDING (no ``startTime``, no ``error``)
while the shortage lasts for it, that is for the rule's ``seconds`` from when it met the rule or,
without ``seconds``, until the rule is cleared (``DELETE /_fake/faults``, a reset); clearing ends
the wait early in either case. Then it goes on as any job (provisioning, RUNNING...). A counted
rule is consumed by each job that meets it, FLEX_START or not (the next jobs do not meet it), and
the FLEX_START jobs that took it still wait out its ``seconds``, or a clear. When
``maxWaitDuration`` (counted from when the job met the rule, on the fake's own clock) passes first,
the job ends JOB_STATE_FAILED with ``error`` ``{"code": 8, "message": "No resources became
available in region <location> within scheduling.maxWaitDuration <value>."}`` (``<value>`` as
written in the job, ``86400s`` by default; the rule's ``code`` and ``reason`` apply only to the
stockout failure). Its service log says when it started waiting and when resources came back.

Settings (``serve(**settings)`` / command line / env):

``gcs_emulator_host``  ``host:port`` of gcp-storage-emulator (env ``STORAGE_EMULATOR_HOST``);
                       without it /gcs is an empty scratch directory and nothing is synced.
``mode``               ``process`` (default), ``container`` or ``timer`` (env
                       ``STEPOP_FAKE_MODE``; timer: see :mod:`cloud.runner`, and no /gcs copy).
                       Process mode runs only the plain base image (``STEPOP_TEST_BASE_IMAGE``,
                       by name or by image ID: :mod:`cloud.runner.images`) as a local process;
                       a pool whose ``imageUri`` is any other image (one built with
                       requirements, say) runs in a container, so it sees what was built. A
                       job labelled ``stepop_fake_mode: process|container|timer`` chooses its
                       own.
``base_image``         the plain base image and the stack's registry
                       (:class:`cloud.runner.BaseImage`; default: ``STEPOP_TEST_BASE_IMAGE`` and
                       ``STEPOP_REGISTRY`` when each job starts).
``queue_seconds``, ``provision_seconds``  time spent QUEUED and PENDING (0.05 s each).
``tmp_base``           where per-job directories go (default: the system temp dir).
``keep_workdirs``      keep per-job directories after the end (debugging).
``max_page_size``      the most jobs one ListCustomJobs page holds, whatever ``pageSize`` asks
                       (1000); ``POST /_fake/page_size {"size": n}`` lowers it until a reset.

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
import os
from typing import Any

from cloud import runner as runner_mod
from cloud.fake_http import FakeServer, Request, Response
from cloud.vertex.api import ApiError, google_error
from cloud.vertex.jobs import JobRoutes
from cloud.vertex.logs import LogRoutes
from cloud.vertex.metadata import MetadataRoutes
from cloud.vertex.validation import validate_custom_job

__all__ = ["VertexService", "main", "serve", "settings_from_env", "stack_env",
           "validate_custom_job"]  # fmt: skip


class VertexService(JobRoutes, LogRoutes, MetadataRoutes):
    """The fake: its parts' routes on one router, Google's error shapes, reset and shutdown.

    The parts, each in its module: :class:`~cloud.vertex.jobs.JobRoutes` (CustomJobs, built on
    :class:`~cloud.vertex.lifecycle.JobLifecycle`) and :class:`~cloud.vertex.logs.LogRoutes`
    (Cloud Logging entries). They share :class:`~cloud.vertex.state.VertexState`, whose
    settings this takes.
    """

    def __init__(self, **settings: Any) -> None:
        """The settings of :class:`~cloud.vertex.state.VertexState` (module docstring)."""
        super().__init__(**settings)
        self._add_job_routes()
        self._add_log_routes()
        self._add_metadata_routes()

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

    def reset(self, jobs: bool) -> None:
        if not jobs:
            return
        self._stop_jobs()
        with self._lock:
            self.jobs.clear()
            self.contexts.clear()

    def shutdown(self) -> None:
        self._stopping.set()
        self._stop_jobs()
        self.runner.stop_all(grace=2)


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
    settings["base_image"] = runner_mod.BaseImage.from_env(env)  # process mode runs it only
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
    parser.add_argument("--max-page-size", type=int, default=1000)
    args = parser.parse_args(argv)
    server = serve(
        args.host,
        args.port,
        gcs_emulator_host=args.gcs_emulator_host,
        mode=args.mode,
        queue_seconds=args.queue_seconds,
        provision_seconds=args.provision_seconds,
        tmp_base=args.tmp_base,
        max_page_size=args.max_page_size,
    )
    print(f"vertex fake listening on {server.url}", flush=True)
    server.serve_until_interrupted()
