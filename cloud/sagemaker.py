"""A SageMaker training-job fake that really runs the job (``cloud.serve cloud.sagemaker``).

It speaks the AWS JSON 1.1 protocol as boto3 and aiobotocore send it with ``endpoint_url``
(``POST /``, ``X-Amz-Target: SageMaker.<Operation>``) and answers CreateTrainingJob,
DescribeTrainingJob, StopTrainingJob and ListTrainingJobs. Moto has no StopTrainingJob and never
runs a job, hence this fake; storage and logs stay in moto (S3, CloudWatch Logs).

What a job goes through, as on the real service:

* refusals at create, with the real error shape (HTTP 400, ``__type`` ValidationException /
  ResourceInUse): every constraint of the request shapes of botocore's service model (name
  pattern, lengths, enums, Environment limits, required members), instance types from
  ``data/sagemaker_training_instance_types.txt``, spot rules, duplicate names, and an image that
  the local registry (v2 API) does not hold;
* InProgress: Starting -> Downloading (S3 channels to /opt/ml/input/data/<channel>, the
  checkpoints from CheckpointConfig.S3Uri, /opt/ml/input/config/{hyperparameters,
  inputdataconfig,resourceconfig}.json) -> Training (the image's ContainerEntrypoint +
  ContainerArguments through :mod:`cloud.runner`, one node per host algo-1..algo-N, output lines
  to CloudWatch Logs group /aws/sagemaker/TrainingJobs, stream ``<job>/algo-<n>-<epoch>``) ->
  Uploading (/opt/ml/model and /opt/ml/output/data to ``<S3OutputPath>/<job>/output/``, as
  model.tar.gz/output.tar.gz or, with CompressionType NONE, as plain files under model/ and
  data/; checkpoints back to their S3Uri);
* Completed; Failed with ``AlgorithmError: <tail of /opt/ml/output/failure>, exit code: N``;
  Stopping -> Stopped (SIGTERM, a grace period, then outputs and checkpoints are uploaded);
  Stopped/MaxRuntimeExceeded and Stopped/MaxWaitTimeExceeded.

Known gaps: S3Prefix channels in File/FastFile mode only (Pipe, manifests and file systems fail
the job with a ClientError that says so); checkpoints are synced at start, stop, interruption and
end, not continuously; no warm pools, metrics, debugger or profiler; in process mode the job's
own code must take /opt/ml paths from args or env (see :mod:`cloud.runner`) and algo-N host names
do not resolve.

Control API (``/_fake/...``, see :mod:`cloud.control`): the fault rules of
:mod:`cloud.fake_http` (throttle -> ``ThrottlingException`` "Rate exceeded", HTTP 400;
error -> 500 InternalFailure / 503 ServiceUnavailable; provisioning_delay; job_failure with
``reason``; preempt with ``after_seconds`` for managed spot jobs: Interrupted, checkpoints
uploaded, Restarting, then the job runs again from its checkpoints; log_delay), counters by
operation, reset, and ``POST /_fake/mode {"mode": "process"|"container"}``. The runner mode
starts as ``STEPOP_SAGEMAKER_MODE`` (default process) or ``python -m cloud.sagemaker --mode``.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import shutil
import sys
import tarfile
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import boto3.exceptions
import botocore.exceptions
import botocore.session

from cloud.fake_http import FakeServer, FakeService, Request, Response
from cloud.runner import MODES, JobLaunch, JobRun, LaunchError, Mount, NodeSpec, Runner

SERVICE = "sagemaker"
ACCOUNT = "123456789012"
LOG_GROUP = "/aws/sagemaker/TrainingJobs"
DATA = Path(__file__).parent / "data"
TERMINAL = ("Completed", "Failed", "Stopped")
ECR_IMAGE = re.compile(r"^\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/(?P<rest>.+)$")
ENVIRONMENT_SPOT = "EnableManagedSpotTraining"
STOP_GRACE = float(os.environ.get("STEPOP_SAGEMAKER_STOP_GRACE", "5"))
INTERNAL_ERROR = "InternalServerError: We encountered an internal error. Please try again."
CAPACITY_ERROR = (
    "CapacityError: Unable to provision requested ML compute capacity. "
    "Please retry using a different ML instance type."
)


def instance_types() -> list[str]:
    """The real training instance types (data file; source noted in its header)."""
    lines = (DATA / "sagemaker_training_instance_types.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


class ApiError(Exception):
    """An error answer in the AWS JSON shape."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


# ---------------------------------------------------------------------------------------------
# Request validation from botocore's service model (what the real front end enforces)


def _camel(name: str) -> str:
    return name[:1].lower() + name[1:]


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict | list):
        return json.dumps(value)[:200]
    return str(value)[:200]


class Validator:
    """Constraint checks of one input shape; messages as AWS's front end words them."""

    def __init__(self, types: list[str]) -> None:
        self.instance_types = types
        self.errors: list[str] = []

    def fail(self, value: Any, path: str, constraint: str) -> None:
        shown = "null" if value is None else f"'{_show(value)}'"
        self.errors.append(f"Value {shown} at '{path}' failed to satisfy constraint: {constraint}")

    def check(self, shape: Any, value: Any, path: str) -> None:
        meta = shape.metadata
        kind = shape.type_name
        if kind == "structure":
            if not isinstance(value, dict):
                raise ApiError("SerializationException", f"Expected an object at {path or '/'}")
            for name in shape.required_members:
                if value.get(name) is None:
                    self.fail(None, self._join(path, name), "Member must not be null")
            for name, member in shape.members.items():
                if value.get(name) is not None:
                    self.check(member, value[name], self._join(path, name))
        elif kind == "list":
            if not isinstance(value, list):
                raise ApiError("SerializationException", f"Expected a list at {path}")
            self._length(value, path, meta, "Member")
            for i, item in enumerate(value):
                self.check(shape.member, item, f"{path}.{i + 1}.member")
        elif kind == "map":
            if not isinstance(value, dict):
                raise ApiError("SerializationException", f"Expected a map at {path}")
            self._length(value, path, meta, "Member")
            for key, item in value.items():
                sub = Validator(self.instance_types)
                sub.check(shape.key, key, path)
                sub.check(shape.value, item, path)
                for err in sub.errors:
                    constraint = err.split("failed to satisfy constraint: ", 1)[1]
                    self.fail(
                        {key: item}, path, f"Map value must satisfy constraint: [{constraint}]"
                    )
        elif kind == "string":
            if not isinstance(value, str):
                raise ApiError("SerializationException", f"Expected a string at {path}")
            enum = list(getattr(shape, "enum", None) or [])
            if shape.name == "TrainingInstanceType":
                enum = self.instance_types
            if enum and value not in enum:
                self.fail(value, path, f"Member must satisfy enum value set: [{', '.join(enum)}]")
                return
            self._length(value, path, meta, "Member")
            pattern = meta.get("pattern")
            if pattern and not _fullmatch(pattern, value):
                self.fail(value, path, f"Member must satisfy regular expression pattern: {pattern}")
        elif kind in ("integer", "long"):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ApiError("SerializationException", f"Expected an integer at {path}")
            if "min" in meta and value < meta["min"]:
                self.fail(
                    value, path, f"Member must have value greater than or equal to {meta['min']}"
                )
            if "max" in meta and value > meta["max"]:
                self.fail(
                    value, path, f"Member must have value less than or equal to {meta['max']}"
                )
        elif kind == "boolean" and not isinstance(value, bool):
            raise ApiError("SerializationException", f"Expected a boolean at {path}")

    def _length(self, value: Any, path: str, meta: dict[str, Any], what: str) -> None:
        if "min" in meta and len(value) < meta["min"]:
            self.fail(
                value, path, f"{what} must have length greater than or equal to {meta['min']}"
            )
        if "max" in meta and len(value) > meta["max"]:
            self.fail(value, path, f"{what} must have length less than or equal to {meta['max']}")

    @staticmethod
    def _join(path: str, name: str) -> str:
        return f"{path}.{_camel(name)}" if path else _camel(name)

    def raise_if_any(self) -> None:
        if self.errors:
            n = len(self.errors)
            head = f"{n} validation error{'s' if n > 1 else ''} detected: "
            raise ApiError("ValidationException", head + "; ".join(self.errors))


_PATTERNS: dict[str, re.Pattern[str] | None] = {}


def _fullmatch(pattern: str, value: str) -> bool:
    if pattern not in _PATTERNS:
        try:
            _PATTERNS[pattern] = re.compile(pattern, re.DOTALL)
        except re.error:  # a Java-only construct: do not refuse what we cannot check
            _PATTERNS[pattern] = None
    compiled = _PATTERNS[pattern]
    return compiled is None or compiled.fullmatch(value) is not None


# ---------------------------------------------------------------------------------------------
# Jobs


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
    stop_requested: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def arn(self) -> str:
        region = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
        return f"arn:aws:sagemaker:{region}:{ACCOUNT}:training-job/{self.name.lower()}"

    @property
    def spot(self) -> bool:
        return bool(self.request.get("EnableManagedSpotTraining"))

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
            if self.training_end is not None:
                out["TrainingEndTime"] = self.training_end
            return out


class _Stop(Exception):
    """The job ended early (stop request, runtime or wait limit): how it ends is attached."""

    def __init__(self, secondary: str, message: str) -> None:
        super().__init__(message)
        self.secondary = secondary
        self.message = message


def _s3_split(uri: str) -> tuple[str, str]:
    rest = uri.split("://", 1)[1]
    bucket, _, key = rest.partition("/")
    return bucket, key


class SageMakerFake(FakeService):
    """The SageMaker API and the job worker threads."""

    name = SERVICE

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__()
        self.env = env
        self.jobs: dict[str, Job] = {}
        self.jobs_lock = threading.Lock()
        self.model = botocore.session.get_session().get_service_model("sagemaker")
        self.types = instance_types()
        self.mode = env.get(
            "STEPOP_SAGEMAKER_MODE", os.environ.get("STEPOP_SAGEMAKER_MODE", "process")
        )
        state = Path(env.get("STEPOP_CLOUD_DIR", "/tmp/stepop-cloud"))
        self.jobs_dir = state / "jobs" / SERVICE
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        self.runner = Runner(self.mode, tmp_base=str(self.jobs_dir))
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
        self.operations = {
            "CreateTrainingJob": self.create,
            "DescribeTrainingJob": self.describe,
            "StopTrainingJob": self.stop,
            "ListTrainingJobs": self.list,
        }

    # --- HTTP ------------------------------------------------------------------------------
    def error_response(self, status: int, message: str, kind: str) -> Response:
        code = {
            "throttle": "ThrottlingException",
            "not_found": "UnknownOperationException",
            "bad": "ValidationException",
        }.get(kind, "ServiceUnavailable" if status == 503 else "InternalFailure")
        if kind == "throttle":
            status, message = 400, "Rate exceeded"
        return self._error(ApiError(code, message, status))

    @staticmethod
    def _error(err: ApiError) -> Response:
        return Response(
            err.status,
            {"__type": err.code, "message": err.message},
            headers={"x-amzn-ErrorType": err.code, "x-amzn-RequestId": str(uuid.uuid4())},
            content_type="application/x-amz-json-1.1",
        )

    def dispatch(self, req: Request) -> Response:
        if req.path == "/_fake/mode":
            return self._mode(req)
        if req.path.startswith("/_fake/"):
            resp = self.control(req)
            return resp if resp is not None else Response(404, {"error": "no such control"})
        target = req.headers.get("x-amz-target", "")
        prefix, _, operation = target.partition(".")
        if req.method != "POST" or prefix != "SageMaker" or not operation:
            return self._error(ApiError("UnknownOperationException", "Unknown operation", 400))
        self.count(operation)
        fault = self.faults.request_fault(operation)
        if fault is not None:
            kind = "throttle" if fault["kind"] == "throttle" else "error"
            return self.error_response(int(fault.get("status", 503)), "injected failure", kind)
        handler = self.operations.get(operation)
        if handler is None:
            msg = f"{operation} is not implemented by the SageMaker fake"
            return self._error(ApiError("UnknownOperationException", msg, 400))
        try:
            body = req.json() or {}
            if not isinstance(body, dict):
                raise ApiError("SerializationException", "Expected a JSON object")
            return Response(200, handler(body), content_type="application/x-amz-json-1.1")
        except ValueError:
            return self._error(ApiError("SerializationException", "Malformed JSON"))
        except ApiError as err:
            return self._error(err)

    def _mode(self, req: Request) -> Response:
        if req.method == "POST":
            mode = (req.json() or {}).get("mode")
            if mode not in MODES:
                return Response(400, {"error": f"mode {mode!r}: use one of {MODES}"})
            self.mode = mode
        return Response(200, {"mode": self.mode})

    def reset(self, jobs: bool) -> None:
        if jobs:
            self.runner.stop_all(grace=1)
            with self.jobs_lock:
                self.jobs.clear()

    def shutdown(self) -> None:
        for job in list(self.jobs.values()):
            job.stop_requested.set()
        self.runner.stop_all(grace=2)
        self.log_sink.close()

    # --- operations ------------------------------------------------------------------------
    def _validate(self, operation: str, body: dict[str, Any]) -> Validator:
        v = Validator(self.types)
        v.check(self.model.operation_model(operation).input_shape, body, "")
        return v

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        v = self._validate("CreateTrainingJob", body)
        if "ServerlessJobConfig" not in body:
            for key in ("AlgorithmSpecification", "ResourceConfig", "StoppingCondition"):
                if body.get(key) is None:
                    v.fail(None, _camel(key), "Member must not be null")
        rc = body.get("ResourceConfig") or {}
        if rc and "InstanceGroups" not in rc:
            for key in ("InstanceType", "InstanceCount", "VolumeSizeInGB"):
                if rc.get(key) is None:
                    v.fail(None, f"resourceConfig.{_camel(key)}", "Member must not be null")
            count = rc.get("InstanceCount")
            if isinstance(count, int) and count < 1:
                v.fail(count, "resourceConfig.instanceCount",
                       "Member must have value greater than or equal to 1")  # fmt: skip
        v.raise_if_any()
        algo = body["AlgorithmSpecification"]
        if not algo.get("TrainingImage") and not algo.get("AlgorithmName"):
            raise ApiError(
                "ValidationException",
                "Either TrainingImage or AlgorithmName must be specified in "
                "AlgorithmSpecification.",
            )
        if algo.get("ContainerArguments") and not algo.get("ContainerEntrypoint"):
            raise ApiError(
                "ValidationException",
                "ContainerArguments can only be specified together with ContainerEntrypoint.",
            )
        stopping = body["StoppingCondition"]
        wait, runtime = stopping.get("MaxWaitTimeInSeconds"), stopping.get("MaxRuntimeInSeconds")
        if body.get("EnableManagedSpotTraining"):
            if wait is None:
                raise ApiError(
                    "ValidationException",
                    "Invalid MaxWaitTimeInSeconds. It is required for managed spot training.",
                )
            if runtime is not None and wait < runtime:
                raise ApiError(
                    "ValidationException",
                    f"Invalid MaxWaitTimeInSeconds. It must be greater than or equal to "
                    f"MaxRuntimeInSeconds ({wait} < {runtime}).",
                )
        elif wait is not None:
            raise ApiError(
                "ValidationException",
                "Invalid MaxWaitTimeInSeconds. It is only supported when EnableManagedSpotTraining "
                "is set to true.",
            )
        names = [c["ChannelName"] for c in body.get("InputDataConfig", [])]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ApiError("ValidationException", f"Channel names must be unique: {sorted(dup)}")
        image = algo.get("TrainingImage")
        if image:
            self._check_image(image, body["RoleArn"])
        name = body["TrainingJobName"]
        now = time.time()
        job = Job(name=name, request=body, created=now, modified=now)
        with self.jobs_lock:
            if name in self.jobs:
                raise ApiError(
                    "ResourceInUse",
                    f"Training job names must be unique within an AWS account and region, and a "
                    f"training job with this name already exists ({self.jobs[name].arn})",
                )
            self.jobs[name] = job
        job.transition("Starting", "Launching requested ML instances")
        threading.Thread(target=self._work, args=(job,), daemon=True, name=f"job-{name}").start()
        return {"TrainingJobArn": job.arn}

    def local_image(self, image: str) -> str:
        """The local-registry reference of ``image`` (an ECR URI keeps its repository and tag)."""
        m = ECR_IMAGE.match(image)
        return f"{self.registry}/{m.group('rest')}" if m else image

    def _check_image(self, image: str, role: str) -> None:
        ref = self.local_image(image)
        host, _, rest = ref.partition("/")
        if "@" in rest:
            repo, digest = rest.split("@", 1)
            tag, ref_id = None, digest
        else:
            repo, _, tag = rest.rpartition(":") if ":" in rest else (rest, "", "latest")
            ref_id = tag
        url = f"http://{host}/v2/{repo}/manifests/{ref_id}"
        req = urllib.request.Request(url, method="HEAD")
        req.add_header(
            "Accept",
            "application/vnd.docker.distribution.manifest.v2+json, "
            "application/vnd.docker.distribution.manifest.list.v2+json, "
            "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json",
        )
        try:
            with urllib.request.urlopen(req, timeout=5):
                return
        except (urllib.error.URLError, OSError, ValueError):
            pass
        raise ApiError(
            "ValidationException",
            f"Cannot find the requested image: {image} with tag: {tag} and digest: "
            f"{'null' if tag else ref_id}. Please check if your ECR image exists and role {role} "
            "has proper pull permissions for SageMaker: ecr:BatchCheckLayerAvailability, "
            "ecr:BatchGetImage, ecr:GetDownloadUrlForLayer",
        )

    def _job(self, body: dict[str, Any]) -> Job:
        name = body.get("TrainingJobName")
        with self.jobs_lock:
            job = self.jobs.get(name) if isinstance(name, str) else None
        if job is None:
            raise ApiError("ValidationException", "Requested resource not found.")
        return job

    def describe(self, body: dict[str, Any]) -> dict[str, Any]:
        self._validate("DescribeTrainingJob", body).raise_if_any()
        return self._job(body).describe()

    def stop(self, body: dict[str, Any]) -> dict[str, Any]:
        self._validate("StopTrainingJob", body).raise_if_any()
        job = self._job(body)
        with job.lock:
            status = job.status
            if status != "InProgress":
                raise ApiError(
                    "ValidationException",
                    f"The request was rejected because the training job is in status {status}.",
                )
            job.status = "Stopping"
            job.modified = time.time()
        job.transition("Stopping", "Stopping the training job")
        job.stop_requested.set()
        return {}

    def list(self, body: dict[str, Any]) -> dict[str, Any]:
        self._validate("ListTrainingJobs", body).raise_if_any()
        with self.jobs_lock:
            jobs = list(self.jobs.values())
        after, before = body.get("CreationTimeAfter"), body.get("CreationTimeBefore")
        mafter, mbefore = body.get("LastModifiedTimeAfter"), body.get("LastModifiedTimeBefore")
        contains, status = body.get("NameContains"), body.get("StatusEquals")
        picked = [
            j
            for j in jobs
            if (after is None or j.created > after)
            and (before is None or j.created < before)
            and (mafter is None or j.modified > mafter)
            and (mbefore is None or j.modified < mbefore)
            and (contains is None or contains in j.name)
            and (status is None or j.status == status)
        ]
        sort_by = body.get("SortBy", "CreationTime")
        key = {"Name": lambda j: j.name, "Status": lambda j: j.status}.get(
            sort_by, lambda j: j.created
        )
        picked.sort(key=key, reverse=body.get("SortOrder", "Descending") == "Descending")
        start = 0
        if body.get("NextToken"):
            try:
                start = int(body["NextToken"])
            except ValueError as exc:
                raise ApiError("ValidationException", "Invalid pagination token.") from exc
        size = int(body.get("MaxResults") or 10)
        page = picked[start : start + size]
        out: dict[str, Any] = {"TrainingJobSummaries": [j.summary() for j in page]}
        if start + size < len(picked):
            out["NextToken"] = str(start + size)
        return out

    # --- the job ---------------------------------------------------------------------------
    def _work(self, job: Job) -> None:
        """The life of one job, on its own thread."""
        workdir = ""
        try:
            delay = self.faults.seconds("provisioning_delay")
            if delay and job.stop_requested.wait(delay):
                raise _Stop("Stopped", "Training job stopped")
            if job.stop_requested.is_set():
                raise _Stop("Stopped", "Training job stopped")
            fault = self.faults.take_job_fault("job_failure", job.name)
            if fault is not None:
                self._fail(job, str(fault.get("reason") or CAPACITY_ERROR))
                return
            workdir = tempfile.mkdtemp(prefix=f"{job.name}-", dir=self.jobs_dir)
            attempt = 0
            while True:
                attempt += 1
                code = self._attempt(job, Path(workdir), attempt)
                if code is not None:
                    break
            if code == 0:
                job.transition("Uploading", "Uploading generated training model")
                try:
                    self._upload(job, Path(workdir))
                except (boto3.exceptions.S3UploadFailedError, botocore.exceptions.ClientError) as e:
                    output = job.request["OutputDataConfig"]["S3OutputPath"]
                    raise ClientError(
                        f"Failed to upload model artifacts to {output}: {e}. Please ensure the "
                        "bucket exists and the role has s3:PutObject on it."
                    ) from e
                job.transition("Completed", "Training job completed", status="Completed")
            else:
                self._upload_checkpoints(job, Path(workdir))
                tail = self._failure_tail(job, Path(workdir))
                self._fail(job, f"AlgorithmError: {tail}, exit code: {code}")
        except _Stop as stop:
            if workdir and job.training_start is not None:
                with contextlib.suppress(Exception):
                    self._upload(job, Path(workdir))
            job.transition(stop.secondary, stop.message, status="Stopped")
        except ClientError as err:
            self._fail(job, f"ClientError: {err}")
        except Exception:
            traceback.print_exc(file=sys.stderr)
            self._fail(job, INTERNAL_ERROR)
        finally:
            with job.lock:
                if job.training_start is not None and job.training_end is None:
                    job.training_end = time.time()
            self.log_sink.flush_all()
            if workdir:
                shutil.rmtree(workdir, ignore_errors=True)

    def _fail(self, job: Job, reason: str) -> None:
        with job.lock:
            job.failure_reason = reason[:1024]
        job.transition("Failed", "Training job failed", status="Failed")

    def _hosts(self, job: Job) -> list[str]:
        count = int(job.request["ResourceConfig"].get("InstanceCount", 1))
        return [f"algo-{i + 1}" for i in range(count)]

    def _launch(self, job: Job, workdir: str, nodes: list[NodeSpec]) -> JobLaunch:
        algo = job.request["AlgorithmSpecification"]
        env = {
            "TRAINING_JOB_NAME": job.name,
            "TRAINING_JOB_ARN": job.arn,
            **job.request.get("Environment", {}),
        }
        entrypoint = algo.get("ContainerEntrypoint")
        args = algo.get("ContainerArguments")
        if not entrypoint:
            args = ["train"]  # what SageMaker runs: `docker run <image> train`
        return JobLaunch(
            fake=SERVICE,
            name=job.name,
            image=self.local_image(algo.get("TrainingImage", "")),
            entrypoint=entrypoint,
            args=args,
            env=env,
            nodes=nodes or [NodeSpec("algo-1")],
            reroot=("/opt/ml",),
        )

    def _local_checkpoint_path(self, job: Job) -> str:
        return (job.request.get("CheckpointConfig") or {}).get("LocalPath") or "/opt/ml/checkpoints"

    def _attempt(self, job: Job, workdir: Path, attempt: int) -> int | None:
        """Download, run and watch the nodes once. None: interrupted (spot), run again."""
        job.transition("Downloading", "Downloading input data")
        channels = workdir / "input" / "data"
        config = self._write_channels(job, channels)
        hosts = self._hosts(job)
        rc = job.request["ResourceConfig"]
        nodes = []
        for rank, host in enumerate(hosts):
            cfg = workdir / "config" / host
            cfg.mkdir(parents=True, exist_ok=True)
            (cfg / "hyperparameters.json").write_text(
                json.dumps(job.request.get("HyperParameters", {}))
            )
            (cfg / "inputdataconfig.json").write_text(json.dumps(config))
            (cfg / "resourceconfig.json").write_text(json.dumps({
                "current_host": host,
                "current_instance_type": rc.get("InstanceType"),
                "current_group_name": "homogeneousCluster",
                "hosts": hosts,
                "instance_groups": [{
                    "instance_group_name": "homogeneousCluster",
                    "instance_type": rc.get("InstanceType"),
                    "hosts": hosts,
                }],
                "network_interface_name": "eth0",
            }))  # fmt: skip
            (workdir / "output" / host / "data").mkdir(parents=True, exist_ok=True)
            mounts = [
                Mount(str(channels), "/opt/ml/input/data", read_only=True),
                Mount(str(cfg), "/opt/ml/input/config", read_only=True),
                Mount(str(workdir / "model" / host), "/opt/ml/model"),
                Mount(str(workdir / "output" / host), "/opt/ml/output"),
            ]
            if job.request.get("CheckpointConfig"):
                local = workdir / "checkpoints" / host
                self._download_checkpoints(job, local)
                mounts.append(Mount(str(local), self._local_checkpoint_path(job)))
            nodes.append(NodeSpec(host=host, rank=rank, mounts=mounts))
        if job.stop_requested.is_set():
            raise _Stop("Stopped", "Training job stopped")
        launch = self._launch(job, str(workdir), nodes)
        epoch = int(time.time())
        streams = {h: f"{job.name}/{h}-{epoch}" for h in hosts}
        try:
            run = self.runner.launch(
                launch,
                on_line=lambda node, _s, line, ts: self.log_sink.put(streams[node.host], line, ts),
                mode=self.mode,
                workdir=str(workdir / f"run-{attempt}"),
            )
        except LaunchError as exc:
            raise ClientError(str(exc)) from exc
        now = time.time()
        with job.lock:
            if job.training_start is None:
                job.training_start = now
        job.transition("Training", "Training image download completed. Training in progress.")
        try:
            return self._watch(job, run, workdir, now)
        finally:
            self.runner.forget(run)
            run.cleanup()
            self.log_sink.flush_all()

    def _watch(self, job: Job, run: JobRun, workdir: Path, started: float) -> int | None:
        """Poll the nodes; enforce stop requests, time limits and injected preemptions."""
        stopping = job.request["StoppingCondition"]
        runtime = stopping.get("MaxRuntimeInSeconds")
        wait = stopping.get("MaxWaitTimeInSeconds")
        last = started
        while True:
            code = run.result()
            now = time.time()
            with job.lock:
                job.billable += now - last
            last = now
            if code is not None:
                return code
            if job.stop_requested.is_set():
                run.stop(STOP_GRACE)
                raise _Stop("Stopped", "Training job stopped")
            if runtime and job.billable >= runtime:
                run.stop(STOP_GRACE)
                raise _Stop(
                    "MaxRuntimeExceeded", "Training job stopped: MaxRuntimeInSeconds reached"
                )
            if wait and now - job.created >= wait:
                run.stop(STOP_GRACE)
                raise _Stop(
                    "MaxWaitTimeExceeded", "Training job stopped: MaxWaitTimeInSeconds reached"
                )
            if job.spot and self._preempt_due(job):
                job.transition("Interrupted", "Training job interrupted: spot capacity reclaimed")
                run.stop(STOP_GRACE)
                self._upload_checkpoints(job, workdir)
                job.transition("Restarting", "Restarting the training job from its checkpoints")
                return None
            time.sleep(0.1)

    def _preempt_due(self, job: Job) -> bool:
        for rule in self.faults.public():
            if rule["kind"] != "preempt" or (rule.get("match") and rule["match"] not in job.name):
                continue
            if job.billable >= float(rule.get("after_seconds", 0)):
                return self.faults.take_job_fault("preempt", job.name) is not None
        return False

    # --- storage ---------------------------------------------------------------------------
    def _objects(self, uri: str) -> list[tuple[str, str]]:
        """(key, path relative to the prefix) of every object under an S3 prefix."""
        bucket, prefix = _s3_split(uri)
        out = []
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for page in pages:
            for obj in page.get("Contents", []):
                key = obj["Key"]
                rel = key[len(prefix) :].lstrip("/") or os.path.basename(key)
                if not key.endswith("/"):
                    out.append((key, rel))
        return out

    def _write_channels(self, job: Job, root: Path) -> dict[str, Any]:
        config: dict[str, Any] = {}
        algo_mode = job.request["AlgorithmSpecification"].get("TrainingInputMode", "File")
        for channel in job.request.get("InputDataConfig", []):
            name = channel["ChannelName"]
            mode = channel.get("InputMode", algo_mode)
            source = channel["DataSource"].get("S3DataSource")
            if source is None:
                raise ClientError(f"channel {name}: the fake supports S3DataSource only")
            if mode == "Pipe" or source["S3DataType"] != "S3Prefix":
                raise ClientError(
                    f"channel {name}: the fake supports S3Prefix channels "
                    "in File/FastFile mode only"
                )
            target = root / name
            target.mkdir(parents=True, exist_ok=True)
            bucket, _ = _s3_split(source["S3Uri"])
            try:
                objects = self._objects(source["S3Uri"])
            except self.s3.exceptions.NoSuchBucket as exc:
                raise ClientError(f"Data download failed: bucket {bucket} does not exist") from exc
            if not objects:
                raise ClientError(
                    f'Data download failed:No S3 objects found under S3 URL "{source["S3Uri"]}" '
                    "given in input data source. Please ensure that the bucket exists in the "
                    "selected region, that objects exist under that S3 prefix, and that the role "
                    f'"{job.request["RoleArn"]}" has "s3:ListBucket" permissions on bucket '
                    f'"{bucket}".'
                )
            for key, rel in objects:
                dest = target / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                self.s3.download_file(bucket, key, str(dest))
            config[name] = {
                "TrainingInputMode": mode,
                "S3DistributionType": source.get("S3DataDistributionType", "FullyReplicated"),
                "RecordWrapperType": channel.get("RecordWrapperType", "None"),
            }
            if "ContentType" in channel:
                config[name]["ContentType"] = channel["ContentType"]
        return config

    def _download_checkpoints(self, job: Job, local: Path) -> None:
        local.mkdir(parents=True, exist_ok=True)
        uri = job.request["CheckpointConfig"]["S3Uri"]
        bucket, _ = _s3_split(uri)
        with contextlib.suppress(self.s3.exceptions.NoSuchBucket):
            for key, rel in self._objects(uri):
                dest = local / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                self.s3.download_file(bucket, key, str(dest))

    def _upload_checkpoints(self, job: Job, workdir: Path) -> None:
        cfg = job.request.get("CheckpointConfig")
        if not cfg:
            return
        bucket, prefix = _s3_split(cfg["S3Uri"])
        for rel, path in _merged(workdir / "checkpoints", self._hosts(job), "").items():
            self.s3.upload_file(str(path), bucket, _key(prefix, rel))

    def _upload(self, job: Job, workdir: Path) -> None:
        """Model, output data and checkpoints to S3, as the service does at the end."""
        out = job.request["OutputDataConfig"]
        bucket, prefix = _s3_split(out["S3OutputPath"])
        base = _key(prefix, f"{job.name}/output")
        hosts = self._hosts(job)
        model = _merged(workdir / "model", hosts, "")
        data = _merged(workdir / "output", hosts, "data")
        if out.get("CompressionType", "GZIP") == "NONE":
            for rel, path in model.items():
                self.s3.upload_file(str(path), bucket, f"{base}/model/{rel}")
            for rel, path in data.items():
                self.s3.upload_file(str(path), bucket, f"{base}/data/{rel}")
            artifacts = f"s3://{bucket}/{base}/model/"
        else:
            self.s3.put_object(Bucket=bucket, Key=f"{base}/model.tar.gz", Body=_targz(model))
            if data:
                self.s3.put_object(Bucket=bucket, Key=f"{base}/output.tar.gz", Body=_targz(data))
            artifacts = f"s3://{bucket}/{base}/model.tar.gz"
        with job.lock:
            job.model_artifacts = artifacts
        self._upload_checkpoints(job, workdir)

    def _failure_tail(self, job: Job, workdir: Path) -> str:
        for host in self._hosts(job):
            failure = workdir / "output" / host / "failure"
            if failure.is_file():
                return failure.read_text(errors="replace")[-900:].strip()
        return ""


class ClientError(Exception):
    """A job failure caused by the request (FailureReason ``ClientError: ...``)."""


def _key(prefix: str, rel: str) -> str:
    prefix = prefix.strip("/")
    return f"{prefix}/{rel}" if prefix else rel


def _merged(root: Path, hosts: list[str], sub: str) -> dict[str, Path]:
    """Files under ``root/<host>/<sub>`` of every host; algo-1 wins a name clash."""
    files: dict[str, Path] = {}
    for host in reversed(hosts):
        base = root / host / sub if sub else root / host
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if path.is_file():
                files[path.relative_to(base).as_posix()] = path
    return files


def _targz(files: dict[str, Path]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for rel, path in sorted(files.items()):
            tar.add(str(path), arcname=rel)
    return buf.getvalue()


class LogSink:
    """Output lines -> CloudWatch Logs (moto), batched, with an optional injected delay."""

    def __init__(self, logs: Any, faults: Any) -> None:
        self.logs = logs
        self.faults = faults
        self.pending: dict[str, list[tuple[float, str]]] = {}
        self.created: set[str] = set()
        self.lock = threading.Lock()
        self.send_lock = threading.Lock()
        self.closed = threading.Event()
        threading.Thread(target=self._loop, daemon=True, name="cloudwatch").start()

    def put(self, stream: str, line: str, ts: float) -> None:
        with self.lock:
            self.pending.setdefault(stream, []).append((ts, line))

    def _loop(self) -> None:
        while not self.closed.wait(0.25):
            try:
                self.flush(self.faults.seconds("log_delay"))
            except Exception:
                traceback.print_exc(file=sys.stderr)

    def flush_all(self) -> None:
        """Send everything that is not held back by a log_delay fault."""
        self.flush(self.faults.seconds("log_delay"))

    def flush(self, delay: float = 0.0) -> None:
        cutoff = time.time() - delay
        with self.send_lock:
            with self.lock:
                batch: dict[str, list[tuple[float, str]]] = {}
                for stream, events in self.pending.items():
                    ready = [e for e in events if e[0] <= cutoff]
                    if ready:
                        batch[stream] = ready
                        self.pending[stream] = events[len(ready) :]
            for stream, events in batch.items():
                self._send(stream, events)

    def _send(self, stream: str, events: list[tuple[float, str]]) -> None:
        if not self.created:
            with contextlib.suppress(self.logs.exceptions.ResourceAlreadyExistsException):
                self.logs.create_log_group(logGroupName=LOG_GROUP)
            self.created.add(LOG_GROUP)
        if stream not in self.created:
            with contextlib.suppress(self.logs.exceptions.ResourceAlreadyExistsException):
                self.logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
            self.created.add(stream)
        for i in range(0, len(events), 5000):
            chunk = [
                {"timestamp": int(ts * 1000), "message": line or " "}
                for ts, line in events[i : i + 5000]
            ]
            self.logs.put_log_events(logGroupName=LOG_GROUP, logStreamName=stream, logEvents=chunk)

    def close(self) -> None:
        self.closed.set()
        with contextlib.suppress(Exception):
            self.flush()


def serve(host: str, port: int, env: dict[str, str]) -> None:
    """Serve the fake until SIGTERM/SIGINT, then stop every job it runs (cloud.stack entry)."""
    server = FakeServer(SageMakerFake({**os.environ, **env}), host, port)
    print(f"[sagemaker] serving on {server.url} in {server.service.mode} mode", flush=True)
    server.serve_until_interrupted()


def start(env: dict[str, str], host: str = "127.0.0.1", port: int = 0) -> FakeServer:
    """Start the fake in this process (tests); ``.shutdown()`` stops it and its jobs."""
    return FakeServer(SageMakerFake({**os.environ, **env}), host, port)


def main(argv: list[str] | None = None) -> None:
    """``python -m cloud.sagemaker [--host H] [--port P] [--mode process|container]``.

    Stand-alone, against the stack's moto and registry (read from .cloud/env).
    """
    import argparse

    from cloud.stack import read_env

    parser = argparse.ArgumentParser(prog="python -m cloud.sagemaker", description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--mode", choices=MODES, default=None)
    args = parser.parse_args(argv)
    env = read_env()
    if args.mode:
        env["STEPOP_SAGEMAKER_MODE"] = args.mode
    serve(args.host, args.port, env)


if __name__ == "__main__":
    main()
