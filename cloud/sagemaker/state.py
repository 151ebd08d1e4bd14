"""The SageMaker fake's state: settings, clients, the job store and what a job reports.

:class:`Job` is one training job with everything DescribeTrainingJob and ListTrainingJobs
answer about it; its status only changes through :meth:`Job.transition`, which keeps the
secondary status transitions as the service lists them. :class:`SageMakerState` is the base of
every part of ``SageMakerFake`` (operations, the job's life).
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import botocore.session

from cloud.fake_http import FakeService
from cloud.runner import BaseImage, Runner
from cloud.sagemaker.logs import LogSink
from cloud.sagemaker.storage import JobStorage

SERVICE = "sagemaker"
ACCOUNT = "123456789012"
DATA = Path(__file__).parent / "data"
TERMINAL = ("Completed", "Failed", "Stopped")
ECR_IMAGE = re.compile(r"^\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/(?P<rest>.+)$")
ENVIRONMENT_SPOT = "EnableManagedSpotTraining"
# Where SageMaker signals a capacity shortage (the ``capacity`` fault's ``at``; the first is the
# default): a job that fails to provision (FailureReason ``CapacityError: ...``), or a
# CreateTrainingJob refused with ``ResourceLimitExceeded`` (the account's quota of the type).
CAPACITY_STAGES = ("provision", "create")
SIGNING_REGION = re.compile(r"Credential=[^/,\s]+/\d{8}/(?P<region>[a-z0-9-]+)/")


def instance_types() -> list[str]:
    """The real training instance types (data file; source noted in its header)."""
    lines = (DATA / "training_instance_types.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


@dataclass
class Job:
    """One training job and everything DescribeTrainingJob reports about it."""

    name: str
    request: dict[str, Any]
    created: float
    status: str = "InProgress"
    secondary: str = "Starting"
    transitions: list[dict[str, Any]] = field(default_factory=list)
    failure_reason: str | None = None
    modified: float = 0.0
    training_start: float | None = None
    training_end: float | None = None
    model_artifacts: str | None = None
    billable: float = 0.0
    region: str = ""  # the region CreateTrainingJob was signed for (capacity rules match it)
    stop_requested: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def arn(self) -> str:
        region = self.region or os.environ.get("AWS_DEFAULT_REGION", "us-east-1")  # signed for
        return f"arn:aws:sagemaker:{region}:{ACCOUNT}:training-job/{self.name.lower()}"

    @property
    def spot(self) -> bool:
        return bool(self.request.get("EnableManagedSpotTraining"))

    @property
    def instance_types(self) -> list[str]:
        """Every instance type the job asks for: ``ResourceConfig.InstanceType`` and, for a
        heterogeneous cluster, each of ``InstanceGroups``."""
        rc = self.request.get("ResourceConfig") or {}
        types = [rc.get("InstanceType")] + [g.get("InstanceType") for g in
                                             rc.get("InstanceGroups") or []]  # fmt: skip
        return [t for t in types if isinstance(t, str) and t]

    def instance_count(self, instance_type: str) -> int:
        """How many instances of ``instance_type`` the job asks for."""
        rc = self.request.get("ResourceConfig") or {}
        groups = [rc] + list(rc.get("InstanceGroups") or [])
        return sum(
            int(g.get("InstanceCount", 1))
            for g in groups
            if str(g.get("InstanceType", "")).casefold() == instance_type.casefold()
        )

    @property
    def hosts(self) -> list[str]:
        """``algo-1`` .. ``algo-N``, one per instance, as SageMaker names them."""
        count = int(self.request["ResourceConfig"].get("InstanceCount", 1))
        return [f"algo-{i + 1}" for i in range(count)]

    def transition(self, secondary: str, message: str, status: str | None = None) -> None:
        """Close the current secondary status and open ``secondary``."""
        now = time.time()
        with self.lock:
            if self.transitions and "EndTime" not in self.transitions[-1]:
                self.transitions[-1]["EndTime"] = now
            entry: dict[str, Any] = {
                "Status": secondary,
                "StartTime": now,
                "StatusMessage": message,
            }
            if secondary in TERMINAL + ("MaxRuntimeExceeded", "MaxWaitTimeExceeded"):
                entry["EndTime"] = now
            self.transitions.append(entry)
            self.secondary = secondary
            if status:
                self.status = status
            self.modified = now

    def describe(self) -> dict[str, Any]:
        """The DescribeTrainingJob answer."""
        r = self.request
        with self.lock:
            out: dict[str, Any] = {
                "TrainingJobName": self.name,
                "TrainingJobArn": self.arn,
                "TrainingJobStatus": self.status,
                "SecondaryStatus": self.secondary,
                "HyperParameters": r.get("HyperParameters", {}),
                "AlgorithmSpecification": r.get("AlgorithmSpecification", {}),
                "RoleArn": r["RoleArn"],
                "OutputDataConfig": r["OutputDataConfig"],
                "ResourceConfig": r.get("ResourceConfig", {}),
                "StoppingCondition": r.get("StoppingCondition", {}),
                "CreationTime": self.created,
                "LastModifiedTime": self.modified,
                "SecondaryStatusTransitions": [dict(t) for t in self.transitions],
                "EnableNetworkIsolation": bool(r.get("EnableNetworkIsolation", False)),
                "EnableInterContainerTrafficEncryption": bool(
                    r.get("EnableInterContainerTrafficEncryption", False)
                ),
                "EnableManagedSpotTraining": self.spot,
            }
            for key in ("InputDataConfig", "CheckpointConfig", "Environment", "VpcConfig",
                        "RetryStrategy"):  # fmt: skip
                if key in r:
                    out[key] = r[key]
            if self.model_artifacts:
                out["ModelArtifacts"] = {"S3ModelArtifacts": self.model_artifacts}
            if self.failure_reason:
                out["FailureReason"] = self.failure_reason
            if self.training_start is not None:
                out["TrainingStartTime"] = self.training_start
            if self.training_end is not None:
                out["TrainingEndTime"] = self.training_end
                seconds = max(1, math.ceil(self.billable))
                out["TrainingTimeInSeconds"] = seconds
                # per instance, as AWS documents it: multiply by InstanceCount for the total
                out["BillableTimeInSeconds"] = seconds
            return out

    def summary(self) -> dict[str, Any]:
        """One ListTrainingJobs entry."""
        with self.lock:
            out = {
                "TrainingJobName": self.name,
                "TrainingJobArn": self.arn,
                "CreationTime": self.created,
                "LastModifiedTime": self.modified,
                "TrainingJobStatus": self.status,
                "SecondaryStatus": self.secondary,
            }
            if plan := (self.request.get("ResourceConfig") or {}).get("TrainingPlanArn"):
                out["TrainingPlanArn"] = plan
            if self.training_end is not None:
                out["TrainingEndTime"] = self.training_end
            return out


class ClientError(Exception):
    """A job failure caused by the request (FailureReason ``ClientError: ...``)."""


class SageMakerState(FakeService):
    """Settings, AWS clients (moto), the runner and the job store shared by the fake's parts."""

    name = SERVICE

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__()
        self.faults.capacity_stages = CAPACITY_STAGES
        self.env = env
        self.jobs: dict[str, Job] = {}
        self.jobs_lock = threading.Lock()
        self.model = botocore.session.get_session().get_service_model("sagemaker")
        self.types = instance_types()
        mode = env.get("STEPOP_SAGEMAKER_MODE", os.environ.get("STEPOP_SAGEMAKER_MODE", "process"))
        state = Path(env.get("STEPOP_CLOUD_DIR", "/tmp/stepop-cloud"))
        self.jobs_dir = state / "jobs" / SERVICE
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        self.runner = Runner(mode, tmp_base=str(self.jobs_dir), base_image=BaseImage.from_env(env))
        self.registry = env.get("STEPOP_REGISTRY", "127.0.0.1:5000")
        aws = {
            "endpoint_url": env.get("STEPOP_MOTO_ENDPOINT") or env.get("AWS_ENDPOINT_URL"),
            "region_name": env.get("AWS_DEFAULT_REGION", "us-east-1"),
            "aws_access_key_id": env.get("AWS_ACCESS_KEY_ID", "testing"),
            "aws_secret_access_key": env.get("AWS_SECRET_ACCESS_KEY", "testing"),
        }
        self.s3 = boto3.client("s3", **aws)
        self.logs = boto3.client("logs", **aws)
        self.log_sink = LogSink(self.logs, self.faults)
        self.storage = JobStorage(self.s3)

    @property
    def mode(self) -> str:
        """The runner's mode (``POST /_fake/mode`` sets it); a job's own mode may differ."""
        return self.runner.mode

    @mode.setter
    def mode(self, value: str) -> None:
        self.runner.mode = value

    @property
    def region(self) -> str:
        """The fake's own region (its AWS clients'), for a request that names none."""
        return self.env.get("AWS_DEFAULT_REGION") or "us-east-1"

    def request_region(self, authorization: str | None) -> str:
        """The region a request was signed for (its SigV4 credential scope), as SageMaker has one
        endpoint per region; the fake's own region when the request carries none."""
        found = SIGNING_REGION.search(authorization or "")
        return found["region"] if found else self.region

    def local_image(self, image: str) -> str:
        """The local-registry reference of ``image`` (an ECR URI keeps its repository and tag)."""
        m = ECR_IMAGE.match(image)
        return f"{self.registry}/{m.group('rest')}" if m else image
