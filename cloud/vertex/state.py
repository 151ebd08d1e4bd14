"""The Vertex AI fake's state: settings, the job store, job bookkeeping shared by its parts.

:class:`VertexState` is the base of every part of ``VertexService`` (job routes, log routes, the
job's life): it holds the settings and jobs under one lock and the operations on a job that
several parts need. A job's state only changes through :meth:`VertexState._set_state`, which
keeps ``startTime``/``endTime``/``updateTime`` as the service does.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from cloud import runner as runner_mod
from cloud.fake_http import FakeService, PageSize, Request, Response, rfc3339
from cloud.vertex.api import ApiError, get_field, render

TERMINAL = {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED"}
# Where Vertex AI signals a capacity shortage (the ``capacity`` fault's ``at``; the first is the
# default): a job that cannot get its machines in the region (PENDING, then FAILED, code 8), or a
# CreateCustomJob refused for the project's quota of them (429 RESOURCE_EXHAUSTED).
CAPACITY_STAGES = ("provision", "create")


def pool_machines(job_spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``machineSpec`` of each worker pool that is not empty."""
    return [
        get_field(pool, "machineSpec") or {}
        for pool in get_field(job_spec, "workerPoolSpecs") or []
        if pool
    ]


def machine_names(machine: dict[str, Any]) -> list[str]:
    """What a ``capacity`` rule may name for a pool: its machine type and accelerator type."""
    names = [get_field(machine, "machineType"), get_field(machine, "acceleratorType")]
    return [n for n in names if isinstance(n, str) and n and n != "ACCELERATOR_TYPE_UNSPECIFIED"]


def quota_metric(machine: dict[str, Any]) -> str:
    """The custom-training quota a pool draws on: its GPUs' (``custom_model_training_nvidia_
    a100_gpus``, ``..._nvidia_l4_gpus``...) when it has NVIDIA GPUs, else the CPUs'
    (``custom_model_training_cpus``; TPU quotas are not modelled)."""
    acc = get_field(machine, "acceleratorType")
    if isinstance(acc, str) and acc.startswith("NVIDIA_"):
        gpu = acc.removeprefix("NVIDIA_").removeprefix("TESLA_").lower()
        return f"custom_model_training_nvidia_{gpu}_gpus"
    return "custom_model_training_cpus"


@dataclass
class LogEntry:
    ts: float
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


class VertexState(FakeService):
    """Settings, the job store and job bookkeeping shared by the parts of the Vertex fake."""

    name = "vertex"

    def __init__(
        self,
        gcs_emulator_host: str | None = None,
        mode: str | None = None,
        queue_seconds: float = 0.05,
        provision_seconds: float = 0.05,
        tmp_base: str | None = None,
        keep_workdirs: bool = False,
        max_page_size: int = 1000,
        base_image: runner_mod.BaseImage | None = None,
    ) -> None:
        super().__init__()
        self.faults.capacity_stages = CAPACITY_STAGES
        self.page_size = PageSize(max_page_size)  # the service's own cap on pageSize
        self.gcs_emulator_host = gcs_emulator_host or os.environ.get("STORAGE_EMULATOR_HOST")
        self.runner = runner_mod.Runner(
            mode or os.environ.get("STEPOP_FAKE_MODE") or runner_mod.MODE_PROCESS,
            tmp_base=tmp_base,
            base_image=base_image,  # None: STEPOP_TEST_BASE_IMAGE/STEPOP_REGISTRY at each job
        )
        self.queue_seconds = float(queue_seconds)
        self.provision_seconds = float(provision_seconds)
        self.tmp_base = tmp_base
        self.keep_workdirs = keep_workdirs
        self.jobs: dict[str, Job] = {}  # full resource name -> job
        self.contexts: dict[str, dict[str, Any]] = {}  # metadata context name -> resource
        self._lock = threading.RLock()
        self._log_seq = 0
        self._stopping = threading.Event()

    @staticmethod
    def _ints(req: Request) -> bool:
        """Whether the client asked for enums as numbers (``$alt=json;enum-encoding=int``)."""
        return "enum-encoding=int" in (req.arg("$alt") or "")

    def _job(self, req: Request) -> Job:
        """The job the route's match names, or the service's 404."""
        m = req.match
        assert m is not None
        name = f"projects/{m['project']}/locations/{m['location']}/customJobs/{m['job']}"
        with self._lock:
            job = self.jobs.get(name)
        if job is None:
            raise ApiError(404, f'The CustomJob "{name}" does not exist.')
        return job

    def _answer(self, req: Request, job: Job) -> Response:
        """The job as the client reads it (enums as numbers or names, as it asked)."""
        with self._lock:
            return Response(200, render(job.resource, self._ints(req)))

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

    # --- log lines ----------------------------------------------------------------------------
    def _log(self, job: Job, task: str, stream: str, text: str, ts: float | None = None) -> None:
        ts = ts or time.time()
        with self._lock:
            self._log_seq += 1
            job.logs.append(LogEntry(ts, task, stream, text, self._log_seq))

    def _visible_logs(self, job: Job, task: str | None = None) -> list[LogEntry]:
        """The job's lines readable now: a log_delay fault holds back lines younger than its
        seconds for as long as it stands (clearing it releases them)."""
        cutoff = time.time() - self.faults.seconds("log_delay")
        with self._lock:
            return [e for e in job.logs if e.ts <= cutoff and (task is None or e.task == task)]

    def _stop_jobs(self) -> None:
        """Cancel every job and wait for their threads (reset, shutdown)."""
        with self._lock:
            alive = list(self.jobs.values())
        runner_mod.stop_job_threads(alive)
