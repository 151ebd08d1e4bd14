"""The Cloud Build fake's state: settings, the GCS client, the build store.

:class:`Job` is one build: its resource (the Build's JSON mapping, enums as names, as GetBuild
answers it), its log and what runs it. A build's status only changes through
:meth:`CloudBuildState.set_status`, which keeps ``startTime``/``finishTime`` as the service does.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloud.build_commands import HostCommand
from cloud.cloudbuild.logs import BuildLog, LogUploader
from cloud.fake_http import FakeService, PageSize, rfc3339

SERVICE = "cloudbuild"
TERMINAL = ("SUCCESS", "FAILURE", "INTERNAL_ERROR", "TIMEOUT", "CANCELLED", "EXPIRED")


@dataclass
class Job:
    """One build: the resource as answered, plus what runs it."""

    resource: dict[str, Any]
    project: str
    location: str
    log: BuildLog
    cancel: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    command: HostCommand | None = None

    @property
    def id(self) -> str:
        return str(self.resource["id"])

    @property
    def status(self) -> str:
        return str(self.resource["status"])


def storage_client(emulator: str | None) -> Any:
    """A google-cloud-storage client bound to the emulator, None without one."""
    if not emulator:
        return None
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    if not emulator.startswith("http"):
        emulator = f"http://{emulator}"
    return storage.Client(
        project="stepop-fake",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": emulator},
    )


class CloudBuildState(FakeService):
    """Settings, storage and the build store shared by the fake's parts.

    Settings (``env`` keys, else defaults): ``STORAGE_EMULATOR_HOST`` (sources and logs),
    ``STEPOP_CLOUD_DIR`` (workspaces and PID files under ``jobs/cloudbuild``),
    ``STEPOP_CLOUDBUILD_CONCURRENCY`` (builds WORKING at once, 4; more stay QUEUED) and
    ``STEPOP_CLOUDBUILD_STOP_GRACE`` (seconds between SIGTERM and SIGKILL, 3).
    """

    name = SERVICE

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__()
        self.page_size = PageSize(1000)  # the most builds one ListBuilds page holds
        self.env = env
        self.storage = storage_client(env.get("STORAGE_EMULATOR_HOST"))
        self.uploader = LogUploader(self.storage, self.faults)
        self.concurrency = int(env.get("STEPOP_CLOUDBUILD_CONCURRENCY", "4"))
        self.stop_grace = float(env.get("STEPOP_CLOUDBUILD_STOP_GRACE", "3"))
        self.slots = threading.Semaphore(self.concurrency)
        state = Path(env.get("STEPOP_CLOUD_DIR", "/tmp/stepop-cloud"))
        self.jobs_dir = state / "jobs" / SERVICE
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        self.jobs: dict[str, Job] = {}  # build id -> job
        self.lock = threading.RLock()
        self.stopping = threading.Event()

    def job(self, project: str, build_id: str) -> Job:
        """The build, or the service's 404 (a build of another project is not found either)."""
        from cloud.cloudbuild.api import ApiError

        with self.lock:
            job = self.jobs.get(build_id)
        if job is None or job.project != project:
            raise ApiError(404, f'Build "{build_id}" not found')
        return job

    def set_status(self, job: Job, status: str, **extra: Any) -> None:
        with self.lock:
            if job.status in TERMINAL:  # a cancel answered first: the end is already written
                return
            now = rfc3339(time.time())
            job.resource["status"] = status
            if status == "WORKING" and "startTime" not in job.resource:
                job.resource["startTime"] = now
            if status in TERMINAL:
                job.resource["finishTime"] = now
            job.resource.update(extra)

    def pid_file(self, job: Job) -> Path:
        return self.jobs_dir / f"{job.id}.pid"

    def running(self) -> list[Job]:
        with self.lock:
            return [j for j in self.jobs.values() if j.status not in TERMINAL]
