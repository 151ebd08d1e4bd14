"""The SageMaker fake's API: CreateTrainingJob, DescribeTrainingJob, StopTrainingJob, List...

Each operation takes the request body and returns the answer body; ``SageMakerFake.dispatch``
routes on ``X-Amz-Target`` and turns an :class:`~cloud.sagemaker.validation.ApiError` into the
AWS JSON error shape.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from typing import Any

from cloud.sagemaker.lifecycle import JobLifecycle
from cloud.sagemaker.state import Job
from cloud.sagemaker.validation import ApiError, Validator, check_create


class TrainingJobOperations(JobLifecycle):
    """The four training-job operations, on the shared job store."""

    def _validate(self, operation: str, body: dict[str, Any]) -> Validator:
        """``body`` against the operation's input shape; ``raise_if_any()`` refuses."""
        v = Validator(self.types)
        v.check(self.model.operation_model(operation).input_shape, body, "")
        return v

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        v = self._validate("CreateTrainingJob", body)
        check_create(v, body)
        image = body["AlgorithmSpecification"].get("TrainingImage")
        if image:
            self._check_image(image, body["RoleArn"])
        name = body["TrainingJobName"]
        now = time.time()
        region = getattr(self._local, "region", None) or self.region
        job = Job(name=name, request=body, created=now, modified=now, region=region)
        with self.jobs_lock:
            if name in self.jobs:
                raise ApiError(
                    "ResourceInUse",
                    f"Training job names must be unique within an AWS account and region, and a "
                    f"training job with this name already exists ({self.jobs[name].arn})",
                )
            self._check_quota(job)
            self.jobs[name] = job
        job.transition("Starting", "Launching requested ML instances")
        threading.Thread(target=self._work, args=(job,), daemon=True, name=f"job-{name}").start()
        return {"TrainingJobArn": job.arn}

    def _check_quota(self, job: Job) -> None:
        """A ``capacity`` rule at ``create``: the account's quota of the instance type is spent,
        and CreateTrainingJob answers ``ResourceLimitExceeded`` as SageMaker does."""
        rule = self.faults.take_capacity("create", job.instance_types, job.region, job.name)
        if rule is None:
            return
        itype = next(t for t in job.instance_types if t.casefold() == rule["machine"].casefold())
        usage = "spot training job usage" if job.spot else "training job usage"
        raise ApiError(
            "ResourceLimitExceeded",
            str(rule.get("reason") or "")
            or f"The account-level service limit '{itype} for {usage}' is 0 Instances, with "
            f"current utilization of 0 Instances and a request delta of "
            f"{job.instance_count(itype)} Instances. Please contact AWS support to request an "
            "increase for this limit.",
        )

    def _check_image(self, image: str, role: str) -> None:
        """Refuse an image the local registry does not hold (a v2 manifest HEAD), as ECR would."""
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
