"""What SageMaker's answers mean: a training job's state, its errors, links and cost.

Pure functions (no API call), so the mapping and the billing arithmetic are unit-tested:

* ``map_status``: TrainingJobStatus and SecondaryStatus to a ``JobStatus`` (a job stopped by
  its own ``max_runtime``/``max_wait`` is a failure, not a stop);
* ``is_transient_error``: throttling, 5xx and connection errors of botocore or aiobotocore,
  which the trigger retries after a pause; ``is_gone_error``: a describe of a job SageMaker
  does not have;
* ``console_links``: the AWS console's job page and its CloudWatch log streams;
* ``billing_facts`` / ``estimate_cost``: billable seconds x instance count x the catalog's
  price (the spot price for a spot job).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from airflow_stepop.backends.base import JobStatus, billing_record

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
TRANSIENT_CODES = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "ThrottledException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestThrottled",
        "RequestThrottledException",
        "ProvisionedThroughputExceededException",
        "SlowDown",
        "InternalFailure",
        "InternalServerError",
        "InternalError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
    }
)
PENDING_SECONDARY = frozenset(
    {"Starting", "Pending", "LaunchingMLInstances", "PreparingTrainingStack", "Downloading",
     "DownloadingTrainingImage", "Restarting", "Interrupted"}
)  # fmt: skip


def is_transient_error(exc: BaseException) -> bool:
    """Throttling, 5xx and connection problems, from botocore or aiobotocore."""
    try:
        from botocore.exceptions import (
            ClientError,
            ConnectionClosedError,
            ConnectTimeoutError,
            EndpointConnectionError,
            ReadTimeoutError,
        )
    except ImportError:  # pragma: no cover
        return False
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return error.get("Code") in TRANSIENT_CODES or int(status) >= 500
    if isinstance(
        exc, (EndpointConnectionError, ConnectionClosedError, ReadTimeoutError, ConnectTimeoutError)
    ):
        return True
    try:
        import aiohttp

        if isinstance(exc, aiohttp.ClientConnectionError):
            return True
    except ImportError:  # pragma: no cover
        pass
    return isinstance(exc, (ConnectionError, TimeoutError))


def error_code(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def is_gone_error(exc: BaseException) -> bool:
    """DescribeTrainingJob of a name SageMaker does not know: ``ValidationException``,
    "Requested resource not found." (the API has no not-found code for training jobs)."""
    response = getattr(exc, "response", None) or {}
    message = str(response.get("Error", {}).get("Message", "")).lower()
    return error_code(exc) == "ResourceNotFound" or (
        error_code(exc) == "ValidationException" and "not found" in message
    )


def map_status(description: dict[str, Any]) -> JobStatus:
    status = description["TrainingJobStatus"]
    secondary = description.get("SecondaryStatus", "")
    if status == "Completed":
        return JobStatus("succeeded")
    if status == "Failed":
        reason = description.get("FailureReason") or "the job failed"
        # SageMaker's own prefix for a job it could not provision (its docs' troubleshooting)
        return JobStatus("failed", reason, capacity=reason.startswith("CapacityError"))
    if status == "Stopped":
        if secondary in ("MaxRuntimeExceeded", "MaxWaitTimeExceeded"):
            limit = "max_runtime" if secondary == "MaxRuntimeExceeded" else "max_wait"
            return JobStatus("failed", f"{secondary}: the job reached its {limit} and was stopped")
        return JobStatus("stopped", "the training job was stopped")
    if status == "InProgress" and secondary in PENDING_SECONDARY:
        # Pending: a training plan's job waiting for the plan's reserved capacity
        return JobStatus("pending", queued=secondary == "Pending")
    return JobStatus("running", stopping=status == "Stopping")  # or InProgress (Training...)


def console_links(region: str, job_name: str) -> dict[str, str]:
    console = f"https://{region}.console.aws.amazon.com"

    # The console's fragment: a path segment is URL-encoded twice, its query once, and '%' is
    # written '$' (/aws/sagemaker/... -> $252Faws..., ?logStreamNameFilter= -> $3F...$3D).
    def encoded(value: str) -> str:
        return quote(quote(value, safe=""), safe="").replace("%", "$")

    return {
        "job": f"{console}/sagemaker/home?region={region}#/jobs/{job_name}",
        "logs": f"{console}/cloudwatch/home?region={region}#logsV2:log-groups/log-group/"
        f"{encoded(LOG_GROUP)}$3FlogStreamNameFilter$3D{encoded(job_name + '/')}",
    }


def billing_facts(description: dict[str, Any]) -> dict[str, Any]:
    """The parts of a DescribeTrainingJob answer that estimate_cost reads (small, JSON)."""
    resources = description.get("ResourceConfig", {})
    return {
        "TrainingJobName": description.get("TrainingJobName"),
        "BillableTimeInSeconds": description.get("BillableTimeInSeconds"),
        "TrainingTimeInSeconds": description.get("TrainingTimeInSeconds"),
        "EnableManagedSpotTraining": description.get("EnableManagedSpotTraining", False),
        "ResourceConfig": {
            "InstanceType": resources.get("InstanceType"),
            "InstanceCount": resources.get("InstanceCount", 1),
        },
    }


def estimate_cost(
    description: dict[str, Any], price_per_hour: float | None, catalog_date: str | None = None
) -> dict[str, Any]:
    """The billing record: billable seconds x instance count x ``price_per_hour`` (the caller
    gives the spot price for a spot job), with SageMaker's own names beside the common ones."""
    resources = description.get("ResourceConfig", {})
    count = int(resources.get("InstanceCount", 1))
    return billing_record(
        job_name=description.get("TrainingJobName"),
        machine=resources.get("InstanceType"),
        count=count,
        billable_seconds=int(description.get("BillableTimeInSeconds") or 0),
        spot=bool(description.get("EnableManagedSpotTraining")),
        price_per_hour=price_per_hour,
        catalog_date=catalog_date,
        instance_type=resources.get("InstanceType"),
        instance_count=count,
        training_seconds=int(description.get("TrainingTimeInSeconds") or 0),
    )
