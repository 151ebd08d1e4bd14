"""The Azure ML fake's state: its settings, the stored jobs and environments, job bookkeeping.

:class:`AzureMLState` is the base of every part of ``AzureMLService`` (workspace, environment,
job and run-history routes, the job's life): it holds what they share, under one lock, and the
few operations on a job that several of them need (find it, render it, change its status, log a
line). A job's status only changes through :meth:`AzureMLState._set_status`, which also keeps its
start and end times.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from cloud import runner as runner_mod
from cloud.azureml.arm import ArmError, ws_id
from cloud.azureml.mlflow_tracking import Tracking
from cloud.fake_http import FakeService, PageSize, rfc3339

TERMINAL = ("Completed", "Failed", "Canceled")
# Not ends: a job stays NotResponding or Paused until it is cancelled, as on the service.
STUCK = ("NotResponding", "Paused")
DEFAULT_COMPUTES = {
    "cpu-cluster": "Standard_DS3_v2",
    "gpu-cluster": "Standard_NC6s_v3",
    "lowpri-gpu-cluster": "Standard_NC6s_v3",
}
LOW_PRIORITY_PREFIX = "lowpri-"  # a cluster named so has LowPriority VMs, the others Dedicated
# Where Azure ML signals a capacity shortage (the ``capacity`` fault's ``at``; the first is the
# default): a job left Queued while no VM of its size can be allocated, or one failed for the
# subscription's vCPU quota (JobNodeCountExceedsCoreQuota).
CAPACITY_STAGES = ("queue", "provision")
DATASTORES = {"workspaceblobstore": "azureml-blobstore", "workspaceartifactstore": "azureml"}
DEFAULT_DATASTORE = "workspaceblobstore"
AZURITE_ACCOUNT = "devstoreaccount1"


@dataclass
class LogLine:
    ts: float
    file: str  # e.g. user_logs/std_log.txt
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
    error: dict[str, Any] | None = None  # run history's error (the ARM resource carries none)
    warnings: list[dict[str, str]] = field(default_factory=list)  # run history's warnings
    cancel: threading.Event = field(default_factory=threading.Event)
    logs: list[LogLine] = field(default_factory=list)
    thread: threading.Thread | None = None
    runs: list[runner_mod.JobRun] = field(default_factory=list)
    final: tuple[str, dict[str, Any] | None] | None = None  # (status, error) once the run ends

    @property
    def status(self) -> str:
        return str(self.resource["properties"]["status"])

    @property
    def props(self) -> dict[str, Any]:
        return self.resource["properties"]


class AzureMLState(FakeService):
    """Settings, stores and job bookkeeping shared by the parts of the Azure ML fake."""

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
        max_page_size: int = 100,
        base_image: runner_mod.BaseImage | None = None,
    ) -> None:
        super().__init__()
        self.faults.capacity_stages = CAPACITY_STAGES
        self.page_size = PageSize(max_page_size)  # jobs a Jobs_List page holds, as the service
        self.conn_str = storage_connection_string or os.environ.get(
            "AZURE_STORAGE_CONNECTION_STRING"
        )
        self.runner = runner_mod.Runner(
            mode or os.environ.get("STEPOP_FAKE_MODE") or runner_mod.MODE_PROCESS,
            tmp_base=tmp_base,
            base_image=base_image,  # None: STEPOP_TEST_BASE_IMAGE/STEPOP_REGISTRY at each job
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
        self.build_locks: dict[str, threading.Lock] = {}  # environment id -> its one build
        self.jobs: dict[str, AmlJob] = {}  # lower-cased id -> job
        self.tracking = Tracking()  # every job is an MLflow run (cloud.azureml.mlflow_tracking)
        self._lock = threading.RLock()
        self._stopping = threading.Event()

    # --- lookups -------------------------------------------------------------------------
    def _find_job(self, m: re.Match[str]) -> AmlJob:
        key = f"{ws_id(m)}/jobs/{m['job']}".lower()
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

    def _job_by_name(self, name: str) -> AmlJob:
        with self._lock:
            found = [j for j in self.jobs.values() if j.name == name]
        if not found:
            raise ArmError(404, "ResourceNotFound", f"No job named '{name}'.")
        return found[0]

    def _render(self, job: AmlJob) -> dict[str, Any]:
        """A copy of the ARM resource, safe to serialize while the job runs."""
        with self._lock:
            return json.loads(json.dumps(job.resource))

    # --- status and log lines ------------------------------------------------------------
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

    def _log(self, job: AmlJob, file: str, text: str, ts: float | None = None) -> None:
        ts = ts or time.time()
        with self._lock:
            job.logs.append(LogLine(ts, file, text))

    def _visible(self, job: AmlJob, path: str | None = None) -> list[LogLine]:
        """The job's lines readable now: a log_delay fault holds back lines younger than its
        seconds for as long as it stands (clearing it releases them)."""
        cutoff = time.time() - self.faults.seconds("log_delay")
        with self._lock:
            return [ln for ln in job.logs if ln.ts <= cutoff and (path is None or ln.file == path)]
