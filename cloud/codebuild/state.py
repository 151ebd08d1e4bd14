"""The CodeBuild fake's state: settings, clients, projects, builds and what BatchGetBuilds says.

:class:`Build` is one build with everything BatchGetBuilds answers about it; its phases only
change through :meth:`Build.enter` and :meth:`Build.close_phase`, which keep ``phases``,
``currentPhase`` and the durations as the service reports them. :class:`CodeBuildState` is the
base of every part of ``CodeBuildFake`` (operations, the build's life).
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import botocore.session

from cloud.build_commands import HostCommand
from cloud.codebuild.logs import LogSink
from cloud.fake_http import FakeService, PageSize

SERVICE = "codebuild"
ACCOUNT = "123456789012"
TERMINAL = ("SUCCEEDED", "FAILED", "FAULT", "TIMED_OUT", "STOPPED")


def region(env: dict[str, str]) -> str:
    return env.get("AWS_DEFAULT_REGION") or env.get("AWS_REGION") or "us-east-1"


@dataclass
class Project:
    """One build project, as CreateProject made it."""

    request: dict[str, Any]
    arn: str
    created: float
    builds: int = 0  # the last buildNumber given

    @property
    def name(self) -> str:
        return str(self.request["name"])

    def describe(self) -> dict[str, Any]:
        """The BatchGetProjects entry."""
        out = {k: v for k, v in self.request.items() if k not in ("tags",)}
        out.update({
            "arn": self.arn,
            "created": self.created,
            "lastModified": self.created,
            "timeoutInMinutes": self.request.get("timeoutInMinutes", 60),
            "queuedTimeoutInMinutes": self.request.get("queuedTimeoutInMinutes", 480),
            "encryptionKey": self.request.get("encryptionKey", "alias/aws/s3"),
            "tags": self.request.get("tags", []),
            "badge": {"badgeEnabled": bool(self.request.get("badgeEnabled", False))},
            "projectVisibility": "PRIVATE",
        })  # fmt: skip
        return out


@dataclass
class Build:
    """One build and everything BatchGetBuilds reports about it."""

    id: str
    arn: str
    number: int
    project: str
    request: dict[str, Any]  # the StartBuild body
    source: dict[str, Any]  # ProjectSource, overrides applied
    environment: dict[str, Any]  # ProjectEnvironment, overrides applied
    service_role: str
    timeout_minutes: int
    queued_timeout_minutes: int
    logs: dict[str, Any]  # LogsLocation
    initiator: str
    started: float
    status: str = "IN_PROGRESS"
    current_phase: str = "SUBMITTED"
    phases: list[dict[str, Any]] = field(default_factory=list)
    ended: float | None = None
    resolved_version: str | None = None
    stop_requested: threading.Event = field(default_factory=threading.Event)
    command: HostCommand | None = None
    slot: bool = False  # holds one of the concurrent-build slots
    thread: threading.Thread | None = None
    lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def uuid(self) -> str:
        return self.id.split(":", 1)[1]

    @property
    def log_target(self) -> tuple[str, str] | None:
        """(group, stream) the build's lines go to, None when CloudWatch Logs are disabled."""
        if "groupName" not in self.logs:
            return None
        return self.logs["groupName"], self.logs["streamName"]

    def enter(self, phase: str) -> None:
        """Close nothing, open ``phase`` (its status comes with :meth:`close_phase`)."""
        with self.lock:
            self.phases.append({"phaseType": phase, "startTime": time.time()})
            self.current_phase = phase

    def close_phase(self, status: str, code: str | None = "", message: str | None = "") -> None:
        """Close the current phase with ``status`` and, unless ``code`` is None, a context."""
        with self.lock:
            phase = self.phases[-1]
            now = time.time()
            phase["phaseStatus"] = status
            phase["endTime"] = now
            phase["durationInSeconds"] = int(round(now - phase["startTime"]))
            if code is not None:
                phase["contexts"] = [{"statusCode": code, "message": message or ""}]

    def finish(self, status: str) -> None:
        """The build's end: its status, then the COMPLETED phase."""
        with self.lock:
            self.status = status
            self.ended = time.time()
            self.phases.append({"phaseType": "COMPLETED", "startTime": self.ended})
            self.current_phase = "COMPLETED"

    def describe(self) -> dict[str, Any]:
        """The BatchGetBuilds entry."""
        with self.lock:
            out: dict[str, Any] = {
                "id": self.id,
                "arn": self.arn,
                "buildNumber": self.number,
                "startTime": self.started,
                "currentPhase": self.current_phase,
                "buildStatus": self.status,
                "projectName": self.project,
                "phases": [
                    {**p, "contexts": [dict(c) for c in p["contexts"]]}
                    if "contexts" in p
                    else dict(p)
                    for p in self.phases
                ],
                "source": dict(self.source),
                "secondarySources": [],
                "secondarySourceVersions": [],
                "artifacts": {"location": ""},
                "cache": {"type": "NO_CACHE"},
                "environment": dict(self.environment),
                "serviceRole": self.service_role,
                "logs": dict(self.logs),
                "timeoutInMinutes": self.timeout_minutes,
                "queuedTimeoutInMinutes": self.queued_timeout_minutes,
                "buildComplete": self.status in TERMINAL,
                "initiator": self.initiator,
                "encryptionKey": f"arn:aws:kms:{self.arn.split(':')[3]}:{ACCOUNT}:alias/aws/s3",
            }
            if "sourceVersion" in self.request:
                out["sourceVersion"] = self.request["sourceVersion"]
            if self.resolved_version:
                out["resolvedSourceVersion"] = self.resolved_version
            if self.ended is not None:
                out["endTime"] = self.ended
            return out


class CodeBuildState(FakeService):
    """Settings, AWS clients (moto), projects and builds shared by the fake's parts.

    Settings (``env`` keys, else defaults): ``STEPOP_MOTO_ENDPOINT`` (or ``AWS_ENDPOINT_URL``),
    ``STEPOP_CLOUD_DIR`` (PID files of running commands under ``jobs/codebuild``),
    ``STEPOP_CODEBUILD_CONCURRENCY`` (builds running at once, 4; more wait in QUEUED),
    ``STEPOP_CODEBUILD_QUEUE_LIMIT`` (builds in progress at most, 100),
    ``STEPOP_CODEBUILD_MINUTE_SECONDS`` (the length of a minute of ``timeoutInMinutes``, 60: a
    test of TIMED_OUT shortens it) and ``STEPOP_CODEBUILD_STOP_GRACE`` (seconds between SIGTERM
    and SIGKILL, 3).
    """

    name = SERVICE

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__()
        self.page_size: PageSize = PageSize(100)  # ids in one List* page, as CodeBuild answers
        self.env = env
        self.region = region(env)
        self.projects: dict[str, Project] = {}
        self.builds: dict[str, Build] = {}
        self.tokens: dict[str, tuple[float, str, str]] = {}  # token -> (when, params, build id)
        self.store_lock = threading.RLock()
        self.model = botocore.session.get_session().get_service_model(SERVICE)
        self.concurrency = int(env.get("STEPOP_CODEBUILD_CONCURRENCY", "4"))
        self.queue_limit = int(env.get("STEPOP_CODEBUILD_QUEUE_LIMIT", "100"))
        self.minute = float(env.get("STEPOP_CODEBUILD_MINUTE_SECONDS", "60"))
        self.stop_grace = float(env.get("STEPOP_CODEBUILD_STOP_GRACE", "3"))
        self.slots = threading.Semaphore(self.concurrency)
        state = Path(env.get("STEPOP_CLOUD_DIR", "/tmp/stepop-cloud"))
        self.jobs_dir = state / "jobs" / SERVICE
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        aws = {
            "endpoint_url": env.get("STEPOP_MOTO_ENDPOINT") or env.get("AWS_ENDPOINT_URL"),
            "region_name": self.region,
            "aws_access_key_id": env.get("AWS_ACCESS_KEY_ID", "testing"),
            "aws_secret_access_key": env.get("AWS_SECRET_ACCESS_KEY", "testing"),
        }
        self.s3 = boto3.client("s3", **aws)
        self.iam = boto3.client("iam", **aws)
        self.logs_client = boto3.client("logs", **aws)
        self.log_sink = LogSink(self.logs_client, self.faults)

    def project_arn(self, name: str) -> str:
        return f"arn:aws:codebuild:{self.region}:{ACCOUNT}:project/{name}"

    def new_build_id(self, project: str) -> tuple[str, str]:
        """(id, arn) of a new build of ``project``."""
        build_id = f"{project}:{uuid.uuid4()}"
        return build_id, f"arn:aws:codebuild:{self.region}:{ACCOUNT}:build/{build_id}"

    def logs_location(
        self, project: str, build_uuid: str, config: dict[str, Any]
    ) -> dict[str, Any]:
        """The build's LogsLocation: CloudWatch group and stream, as CodeBuild names them."""
        cw = dict(config.get("cloudWatchLogs") or {"status": "ENABLED"})
        s3 = dict(config.get("s3Logs") or {"status": "DISABLED"})
        out: dict[str, Any] = {"cloudWatchLogs": cw, "s3Logs": s3}
        if cw.get("status") == "DISABLED":
            return out
        group = cw.get("groupName") or f"/aws/codebuild/{project}"
        stream = f"{cw['streamName']}/{build_uuid}" if cw.get("streamName") else build_uuid
        console = f"https://console.aws.amazon.com/cloudwatch/home?region={self.region}"
        out.update({
            "groupName": group,
            "streamName": stream,
            "deepLink": f"{console}#logsV2:log-groups/log-group/{group}/log-events/{stream}",
            "cloudWatchLogsArn": (
                f"arn:aws:logs:{self.region}:{ACCOUNT}:log-group:{group}:log-stream:{stream}"
            ),
        })  # fmt: skip
        return out

    def pid_file(self, build: Build) -> Path:
        return self.jobs_dir / f"{build.uuid}.pid"

    def role_exists(self, role: str) -> bool:
        """Whether moto's IAM knows the role (an ARN, or a name as CodeBuild also takes)."""
        name = role.rsplit("/", 1)[-1] if role.startswith("arn:") else role
        try:
            found = self.iam.get_role(RoleName=name)["Role"]
        except self.iam.exceptions.NoSuchEntityException:
            return False
        return not role.startswith("arn:") or found["Arn"] == role

    def running(self) -> list[Build]:
        with self.store_lock:
            return [b for b in self.builds.values() if b.status not in TERMINAL]
