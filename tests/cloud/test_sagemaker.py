"""Self-tests of the SageMaker fake through boto3 and aiobotocore only (no product code).

The job is tests/cloud/sagemaker_job.py, uploaded as the ``code`` channel and run by the fake in
the base image from the local registry (process mode, except one container-mode test).
"""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from cloud.control import ControlError, FakeControl
from tests.waiting import wait_for

JOB_SCRIPT = Path(__file__).with_name("sagemaker_job.py")
ROLE = "arn:aws:iam::123456789012:role/stepop-selftest"
LOG_GROUP = "/aws/sagemaker/TrainingJobs"
TERMINAL = ("Completed", "Failed", "Stopped")


@pytest.fixture(scope="module")
def aws(cloud_stack: dict[str, str]) -> dict[str, Any]:
    """Client settings for the emulated AWS: moto, and the SageMaker fake for SageMaker."""
    if "STEPOP_SAGEMAKER_ENDPOINT" not in cloud_stack:
        pytest.skip("the stack runs no SageMaker fake")
    return {
        "region_name": "us-east-1",
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
        "moto": cloud_stack["STEPOP_MOTO_ENDPOINT"],
        "sagemaker": cloud_stack["STEPOP_SAGEMAKER_ENDPOINT"],
    }


def _client(aws: dict[str, Any], service: str, **config: Any) -> Any:
    endpoint = aws["sagemaker"] if service == "sagemaker" else aws["moto"]
    creds = {k: aws[k] for k in ("region_name", "aws_access_key_id", "aws_secret_access_key")}
    return boto3.client(service, endpoint_url=endpoint, config=Config(**config), **creds)


@pytest.fixture(scope="module")
def sm(aws: dict[str, Any]) -> Any:
    """SageMaker client without retries, so injected faults surface."""
    return _client(aws, "sagemaker", retries={"total_max_attempts": 1, "mode": "standard"})


@pytest.fixture(scope="module")
def s3(aws: dict[str, Any]) -> Any:
    return _client(aws, "s3")


@pytest.fixture(scope="module")
def logs(aws: dict[str, Any]) -> Any:
    return _client(aws, "logs")


@pytest.fixture(scope="module")
def ctl(aws: dict[str, Any]) -> FakeControl:
    return FakeControl(aws["sagemaker"])


@pytest.fixture(autouse=True)
def _clean_faults(ctl: FakeControl) -> Iterator[None]:
    """Every test starts and ends with no fault rules, zero counters and process mode."""
    ctl.reset()
    ctl.mode("process")
    yield
    ctl.reset()
    ctl.mode("process")


@pytest.fixture(scope="module")
def bucket(s3: Any) -> str:
    """A bucket with the job script (channel ``code``) and its input (channel ``train``)."""
    name = f"sm-selftest-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="code/job.py", Body=JOB_SCRIPT.read_bytes())
    s3.put_object(Bucket=name, Key="data/train/numbers.txt", Body=b"1 2 3 4\n")
    return name


@pytest.fixture
def request_for(bucket: str, registry_image: str) -> Callable[..., dict[str, Any]]:
    """A valid CreateTrainingJob request running ``sagemaker_job.py <action>``."""

    def make(action: str = "ok", **overrides: Any) -> dict[str, Any]:
        req: dict[str, Any] = {
            "TrainingJobName": f"selftest-{action}-{uuid.uuid4().hex[:10]}",
            "RoleArn": ROLE,
            "AlgorithmSpecification": {
                "TrainingImage": registry_image,
                "TrainingInputMode": "File",
                "ContainerEntrypoint": ["python3", "/opt/ml/input/data/code/job.py"],
                "ContainerArguments": [action],
            },
            "HyperParameters": {"lr": "0.1"},
            "Environment": {"ML": "/opt/ml"},
            "InputDataConfig": [
                _channel("code", f"s3://{bucket}/code"),
                _channel("train", f"s3://{bucket}/data/train"),
            ],
            "OutputDataConfig": {
                "S3OutputPath": f"s3://{bucket}/output",
                "CompressionType": "NONE",
            },
            "ResourceConfig": {
                "InstanceType": "ml.m5.large",
                "InstanceCount": 1,
                "VolumeSizeInGB": 5,
            },
            "StoppingCondition": {"MaxRuntimeInSeconds": 300},
        }
        req.update(overrides)
        return req

    return make


def _channel(name: str, uri: str) -> dict[str, Any]:
    return {
        "ChannelName": name,
        "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": uri}},
    }


def finished(sm: Any, name: str, timeout: float = 60.0) -> dict[str, Any]:
    """DescribeTrainingJob once the job reached a terminal status."""

    def done() -> dict[str, Any] | None:
        d = sm.describe_training_job(TrainingJobName=name)
        return d if d["TrainingJobStatus"] in TERMINAL else None

    return wait_for(done, timeout, f"{name} to finish")


def log_lines(logs: Any, name: str) -> dict[str, list[str]]:
    """Log stream name -> messages of a job's streams (empty when none exists yet)."""
    out: dict[str, list[str]] = {}
    try:
        streams = logs.describe_log_streams(logGroupName=LOG_GROUP, logStreamNamePrefix=f"{name}/")
    except logs.exceptions.ResourceNotFoundException:  # no job has written a line yet
        return out
    for stream in streams["logStreams"]:
        events = logs.get_log_events(
            logGroupName=LOG_GROUP, logStreamName=stream["logStreamName"], startFromHead=True
        )
        out[stream["logStreamName"]] = [e["message"] for e in events["events"]]
    return out


def _read(s3: Any, bucket: str, key: str) -> bytes:
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


# --- the life of a job ---------------------------------------------------------------------


def test_job_runs_to_completion_with_output_in_s3(
    sm: Any, s3: Any, logs: Any, bucket: str, request_for: Callable[..., dict[str, Any]]
) -> None:
    req = request_for("ok")
    name = req["TrainingJobName"]
    arn = sm.create_training_job(**req)["TrainingJobArn"]
    assert arn.endswith(f":training-job/{name.lower()}")

    d = finished(sm, name)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    assert d["SecondaryStatus"] == "Completed"
    assert [t["Status"] for t in d["SecondaryStatusTransitions"]] == [
        "Starting", "Downloading", "Training", "Uploading", "Completed"
    ]  # fmt: skip
    assert all("EndTime" in t for t in d["SecondaryStatusTransitions"])
    assert d["BillableTimeInSeconds"] >= 1 and d["TrainingTimeInSeconds"] >= 1
    assert d["TrainingStartTime"] <= d["TrainingEndTime"]
    base = f"output/{name}/output"
    assert d["ModelArtifacts"]["S3ModelArtifacts"] == f"s3://{bucket}/{base}/model/"
    assert _read(s3, bucket, f"{base}/model/sub/sum.txt") == b"10 algo-1"
    metrics = json.loads(_read(s3, bucket, f"{base}/data/metrics.json"))
    assert metrics == {"host": "algo-1", "channels": ["code", "train"]}

    streams = wait_for(lambda: log_lines(logs, name), 10, "log stream")
    (stream, lines), *_ = streams.items()
    assert stream.startswith(f"{name}/algo-1-") and stream.rsplit("-", 1)[1].isdigit()
    assert 'host=algo-1 hosts=algo-1 hp={"lr": "0.1"}' in lines
    assert "to stderr" in lines


def test_gzip_output_is_model_tar_gz(
    sm: Any, s3: Any, bucket: str, request_for: Callable[..., dict[str, Any]]
) -> None:
    req = request_for("ok", OutputDataConfig={"S3OutputPath": f"s3://{bucket}/gz"})
    name = req["TrainingJobName"]
    sm.create_training_job(**req)
    d = finished(sm, name)
    assert d["ModelArtifacts"]["S3ModelArtifacts"] == f"s3://{bucket}/gz/{name}/output/model.tar.gz"
    with tarfile.open(fileobj=io.BytesIO(_read(s3, bucket, f"gz/{name}/output/model.tar.gz"))) as t:
        assert t.extractfile("sub/sum.txt").read() == b"10 algo-1"  # type: ignore[union-attr]
    with tarfile.open(
        fileobj=io.BytesIO(_read(s3, bucket, f"gz/{name}/output/output.tar.gz"))
    ) as t:
        assert "metrics.json" in t.getnames()


def test_multi_node_runs_one_node_per_host(
    sm: Any, s3: Any, logs: Any, bucket: str, request_for: Callable[..., dict[str, Any]]
) -> None:
    rc = {"InstanceType": "ml.g5.xlarge", "InstanceCount": 2, "VolumeSizeInGB": 5}
    req = request_for("ok", ResourceConfig=rc)
    name = req["TrainingJobName"]
    sm.create_training_job(**req)
    d = finished(sm, name)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    assert d["BillableTimeInSeconds"] == d["TrainingTimeInSeconds"]  # per instance

    def two_streams() -> dict[str, list[str]] | None:
        streams = log_lines(logs, name)
        return streams if len(streams) == 2 else None

    streams = wait_for(two_streams, 10, "2 streams")
    hosts = sorted(line for lines in streams.values() for line in lines if line.startswith("host="))
    assert hosts == [
        'host=algo-1 hosts=algo-1,algo-2 hp={"lr": "0.1"}',
        'host=algo-2 hosts=algo-1,algo-2 hp={"lr": "0.1"}',
    ]
    assert _read(s3, bucket, f"output/{name}/output/model/sub/sum.txt") == b"10 algo-1"


def test_algorithm_error_reports_the_failure_file(
    sm: Any, request_for: Callable[..., dict[str, Any]]
) -> None:
    req = request_for("fail")
    sm.create_training_job(**req)
    d = finished(sm, req["TrainingJobName"])
    assert d["TrainingJobStatus"] == "Failed"
    assert d["SecondaryStatus"] == "Failed"
    assert d["FailureReason"] == "AlgorithmError: ValueError: boom at step 3, exit code: 3"


def test_missing_output_bucket_fails_with_a_client_error_that_says_so(
    sm: Any, request_for: Callable[..., dict[str, Any]]
) -> None:
    req = request_for(
        "ok",
        OutputDataConfig={"S3OutputPath": "s3://no-such-bucket/out", "CompressionType": "NONE"},
    )
    sm.create_training_job(**req)
    d = finished(sm, req["TrainingJobName"])
    assert d["TrainingJobStatus"] == "Failed"
    assert d["FailureReason"].startswith("ClientError: Failed to upload model artifacts")
    assert "s3://no-such-bucket/out" in d["FailureReason"]


def test_stop_sends_sigterm_and_uploads_the_model(
    sm: Any, s3: Any, logs: Any, bucket: str, request_for: Callable[..., dict[str, Any]]
) -> None:
    req = request_for("sleep")
    name = req["TrainingJobName"]
    sm.create_training_job(**req)
    # The create call returns at once; a job that sleeps until stopped is the one whose
    # InProgress status a test can see without racing the job's end.
    assert sm.describe_training_job(TrainingJobName=name)["TrainingJobStatus"] == "InProgress"
    wait_for(
        lambda: any("sleeping" in lines for lines in log_lines(logs, name).values()),
        20,
        "the job to sleep",
    )
    sm.stop_training_job(TrainingJobName=name)
    assert sm.describe_training_job(TrainingJobName=name)["TrainingJobStatus"] in (
        "Stopping", "Stopped"
    )  # fmt: skip
    d = finished(sm, name)
    assert (d["TrainingJobStatus"], d["SecondaryStatus"]) == ("Stopped", "Stopped")
    assert "Stopping" in [t["Status"] for t in d["SecondaryStatusTransitions"]]
    assert _read(s3, bucket, f"output/{name}/output/model/stopped.txt") == b"saved on SIGTERM"
    with pytest.raises(ClientError) as err:
        sm.stop_training_job(TrainingJobName=name)
    assert err.value.response["Error"]["Code"] == "ValidationException"
    assert "status Stopped" in err.value.response["Error"]["Message"]


def test_max_runtime_stops_the_job(sm: Any, request_for: Callable[..., dict[str, Any]]) -> None:
    req = request_for("sleep", StoppingCondition={"MaxRuntimeInSeconds": 1})
    sm.create_training_job(**req)
    d = finished(sm, req["TrainingJobName"])
    assert (d["TrainingJobStatus"], d["SecondaryStatus"]) == ("Stopped", "MaxRuntimeExceeded")


def test_list_filters_and_pagination(sm: Any, request_for: Callable[..., dict[str, Any]]) -> None:
    tag = uuid.uuid4().hex[:6]
    names = [f"list-{tag}-{i}" for i in range(3)]
    before = time.time()
    for n in names:
        sm.create_training_job(**request_for("ok", TrainingJobName=n))
    for n in names:
        finished(sm, n)
    sm.create_training_job(**request_for("fail", TrainingJobName=f"list-{tag}-failed"))
    finished(sm, f"list-{tag}-failed")

    page = sm.list_training_jobs(NameContains=f"list-{tag}-", MaxResults=2, SortBy="Name",
                                 SortOrder="Ascending")  # fmt: skip
    assert [s["TrainingJobName"] for s in page["TrainingJobSummaries"]] == names[:2]
    rest = sm.list_training_jobs(NameContains=f"list-{tag}-", MaxResults=2, SortBy="Name",
                                 SortOrder="Ascending", NextToken=page["NextToken"])  # fmt: skip
    assert [s["TrainingJobName"] for s in rest["TrainingJobSummaries"]] == [
        names[2], f"list-{tag}-failed"
    ]  # fmt: skip
    assert "NextToken" not in rest

    done = sm.list_training_jobs(NameContains=tag, StatusEquals="Completed")
    assert sorted(s["TrainingJobName"] for s in done["TrainingJobSummaries"]) == names
    assert all(s["TrainingJobStatus"] == "Completed" for s in done["TrainingJobSummaries"])
    recent = sm.list_training_jobs(NameContains=tag, LastModifiedTimeAfter=before, MaxResults=100)
    assert len(recent["TrainingJobSummaries"]) == 4
    future = sm.list_training_jobs(NameContains=tag, LastModifiedTimeAfter=time.time() + 3600)
    assert future["TrainingJobSummaries"] == []
    paginated = sm.get_paginator("list_training_jobs").paginate(
        NameContains=tag, PaginationConfig={"PageSize": 1}
    )
    assert sum(len(p["TrainingJobSummaries"]) for p in paginated) == 4


def test_aiobotocore_client(
    aws: dict[str, Any], request_for: Callable[..., dict[str, Any]]
) -> None:
    from aiobotocore.session import get_session

    async def main() -> tuple[str, list[str]]:
        creds = {k: aws[k] for k in ("region_name", "aws_access_key_id", "aws_secret_access_key")}
        async with get_session().create_client(
            "sagemaker", endpoint_url=aws["sagemaker"], **creds
        ) as client:
            req = request_for("ok")
            await client.create_training_job(**req)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                d = await client.describe_training_job(TrainingJobName=req["TrainingJobName"])
                if d["TrainingJobStatus"] in TERMINAL:
                    break
                await asyncio.sleep(0.05)
            listed = await client.list_training_jobs(NameContains=req["TrainingJobName"])
            return d["TrainingJobStatus"], [
                s["TrainingJobName"] for s in listed["TrainingJobSummaries"]
            ]

    status, names = asyncio.run(main())
    assert status == "Completed"
    assert len(names) == 1


# --- faults and counters -------------------------------------------------------------------


def test_throttling_is_the_real_error_and_counted(
    sm: Any, aws: dict[str, Any], ctl: FakeControl, request_for: Callable[..., dict[str, Any]]
) -> None:
    req = request_for("ok")
    sm.create_training_job(**req)
    name = req["TrainingJobName"]
    ctl.add_faults({"kind": "throttle", "operation": "DescribeTrainingJob", "count": 2})
    for _ in range(2):
        with pytest.raises(ClientError) as err:
            sm.describe_training_job(TrainingJobName=name)
        assert err.value.response["Error"]["Code"] == "ThrottlingException"
        assert err.value.response["Error"]["Message"] == "Rate exceeded"
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    sm.describe_training_job(TrainingJobName=name)
    assert ctl.counters()["DescribeTrainingJob"] == 3
    assert ctl.counters()["CreateTrainingJob"] == 1

    # botocore itself knows it as throttling: its retries absorb it.
    ctl.add_faults({"kind": "throttle", "operation": "DescribeTrainingJob", "count": 2})
    retrying = _client(aws, "sagemaker", retries={"total_max_attempts": 5, "mode": "standard"})
    assert retrying.describe_training_job(TrainingJobName=name)["TrainingJobName"] == name
    assert ctl.counters()["DescribeTrainingJob"] == 6


def test_throttling_at_a_rate(sm: Any, ctl: FakeControl) -> None:
    ctl.add_faults({"kind": "throttle", "operation": "ListTrainingJobs", "rate": 0.5})
    outcomes = []
    for _ in range(6):
        try:
            sm.list_training_jobs(MaxResults=1)
            outcomes.append("ok")
        except ClientError as err:
            outcomes.append(err.response["Error"]["Code"])
    assert outcomes.count("ThrottlingException") == 3
    assert ctl.counters()["ListTrainingJobs"] == 6


def test_server_error(sm: Any, ctl: FakeControl) -> None:
    ctl.add_faults({"kind": "error", "status": 503, "operation": "*", "count": 1})
    with pytest.raises(ClientError) as err:
        sm.list_training_jobs()
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert err.value.response["Error"]["Code"] == "ServiceUnavailable"
    sm.list_training_jobs()


def test_injected_job_failure(
    sm: Any, ctl: FakeControl, request_for: Callable[..., dict[str, Any]]
) -> None:
    reason = "CapacityError: Unable to provision requested ML compute capacity."
    ctl.add_faults({"kind": "job_failure", "reason": reason, "match": "selftest-ok", "count": 1})
    req = request_for("ok")
    sm.create_training_job(**req)
    d = finished(sm, req["TrainingJobName"])
    assert (d["TrainingJobStatus"], d["FailureReason"]) == ("Failed", reason)


def test_slow_provisioning_holds_starting(
    sm: Any, ctl: FakeControl, request_for: Callable[..., dict[str, Any]]
) -> None:
    ctl.add_faults({"kind": "provisioning_delay", "seconds": 1.0})
    req = request_for("ok")
    sm.create_training_job(**req)
    assert sm.describe_training_job(TrainingJobName=req["TrainingJobName"])["SecondaryStatus"] == (
        "Starting"
    )
    d = finished(sm, req["TrainingJobName"])
    starting = d["SecondaryStatusTransitions"][0]
    assert starting["Status"] == "Starting"
    assert (starting["EndTime"] - starting["StartTime"]).total_seconds() >= 1.0


def test_spot_preemption_resumes_from_checkpoint(
    sm: Any,
    s3: Any,
    logs: Any,
    bucket: str,
    ctl: FakeControl,
    request_for: Callable[..., dict[str, Any]],
) -> None:
    ckpt = f"s3://{bucket}/ckpt/{uuid.uuid4().hex[:6]}"
    req = request_for(
        "spot",
        EnableManagedSpotTraining=True,
        StoppingCondition={"MaxRuntimeInSeconds": 300, "MaxWaitTimeInSeconds": 600},
        CheckpointConfig={"S3Uri": ckpt},
    )
    name = req["TrainingJobName"]
    sm.create_training_job(**req)
    wait_for(
        lambda: any("checkpoint written" in v for v in log_lines(logs, name).values()),
        20,
        "the first checkpoint",
    )
    ctl.add_faults({"kind": "preempt", "after_seconds": 0, "match": name, "count": 1})
    d = finished(sm, name)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    statuses = [t["Status"] for t in d["SecondaryStatusTransitions"]]
    assert statuses[statuses.index("Interrupted") :] == [
        "Interrupted", "Restarting", "Downloading", "Training", "Uploading", "Completed"
    ]  # fmt: skip
    model = _read(s3, bucket, f"output/{name}/output/model/resumed.txt")
    assert model == b"resumed from 7"
    assert _read(s3, bucket, ckpt.split("/", 3)[3] + "/step.txt") == b"7"
    assert len(log_lines(logs, name)) >= 1


# --- capacity: CapacityError when the instances cannot be had, ResourceLimitExceeded for quota --
# The capacity rules are this checkout's code: a fake of this module's own runs them, in this
# process, on the stack's moto and registry (the stack's fake may be an older process).
CAPACITY_ERROR = (
    "CapacityError: Unable to provision requested ML compute capacity. "
    "Please retry using a different ML instance type."
)
P3 = {"InstanceType": "ml.p3.2xlarge", "InstanceCount": 2, "VolumeSizeInGB": 5}


@pytest.fixture(scope="module")
def own_fake(aws: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from cloud.sagemaker.server import start

    env = {"STEPOP_MOTO_ENDPOINT": aws["moto"], "AWS_DEFAULT_REGION": "us-east-1",
           "STEPOP_CLOUD_DIR": str(tmp_path_factory.mktemp("sm-capacity"))}  # fmt: skip
    server = start(env)
    yield server
    server.shutdown()


@pytest.fixture
def own(own_fake: Any, aws: dict[str, Any]) -> Iterator[tuple[Any, FakeControl]]:
    """A client of the module's own fake (no retries) and its control API, with no rules."""
    control = FakeControl(own_fake.url)
    control.reset()
    yield (
        _client({**aws, "sagemaker": own_fake.url}, "sagemaker", retries={"total_max_attempts": 1}),
        control,
    )
    control.reset()


def test_a_capacity_shortage_fails_the_job_with_capacity_error(
    own: tuple[Any, FakeControl], request_for: Callable[..., dict[str, Any]]
) -> None:
    sm, control = own
    control.add_faults({"kind": "capacity", "machine": "ml.p3.2xlarge", "seconds": 1.0})
    req = request_for("ok", ResourceConfig=P3)
    name = req["TrainingJobName"]
    sm.create_training_job(**req)

    def retrying() -> bool:
        d = sm.describe_training_job(TrainingJobName=name)
        message = d["SecondaryStatusTransitions"][-1]["StatusMessage"]
        return d["SecondaryStatus"] == "Starting" and "Insufficient capacity" in message

    wait_for(retrying, 10, "the Starting status to say EC2 is short of instances")
    d = finished(sm, name)
    assert (d["TrainingJobStatus"], d["FailureReason"]) == ("Failed", CAPACITY_ERROR)
    assert [t["Status"] for t in d["SecondaryStatusTransitions"]] == ["Starting", "Failed"]
    assert "TrainingStartTime" not in d  # it never trained
    other = request_for("ok")  # ml.m5.large: not short
    sm.create_training_job(**other)
    assert finished(sm, other["TrainingJobName"])["TrainingJobStatus"] == "Completed"
    assert [rule["at"] for rule in control.faults()] == ["provision"]  # it stands for every job


def test_a_spent_quota_refuses_create_training_job_in_its_region(
    own: tuple[Any, FakeControl],
    own_fake: Any,
    aws: dict[str, Any],
    request_for: Callable[..., dict[str, Any]],
) -> None:
    sm, control = own
    control.add_faults({"kind": "capacity", "machine": "ML.P3.2XLARGE", "at": "create",
                        "region": "eu-west-1", "count": 1})  # fmt: skip
    here = request_for("ok", ResourceConfig=P3)
    sm.create_training_job(**here)  # signed for us-east-1: the rule is another region's
    europe = _client({**aws, "sagemaker": own_fake.url, "region_name": "eu-west-1"}, "sagemaker",
                     retries={"total_max_attempts": 1})  # fmt: skip
    refused = request_for("ok", ResourceConfig=P3)
    with pytest.raises(ClientError) as info:
        europe.create_training_job(**refused)
    error = info.value.response["Error"]
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert error["Code"] == "ResourceLimitExceeded"
    assert error["Message"] == (
        "The account-level service limit 'ml.p3.2xlarge for training job usage' is 0 Instances, "
        "with current utilization of 0 Instances and a request delta of 2 Instances. Please "
        "contact AWS support to request an increase for this limit."
    )
    assert isinstance(info.value, europe.exceptions.ResourceLimitExceeded)
    with pytest.raises(ClientError):  # no job was created
        europe.describe_training_job(TrainingJobName=refused["TrainingJobName"])
    europe.create_training_job(**refused)  # count 1: the quota is back
    for name in (here["TrainingJobName"], refused["TrainingJobName"]):
        assert finished(sm, name)["TrainingJobStatus"] == "Completed"


def test_a_spot_job_meets_its_spot_quota(
    own: tuple[Any, FakeControl], request_for: Callable[..., dict[str, Any]]
) -> None:
    sm, control = own
    control.add_faults({"kind": "capacity", "machine": "ml.p3.2xlarge", "at": "create"})
    req = request_for(
        "ok",
        ResourceConfig=P3,
        EnableManagedSpotTraining=True,
        StoppingCondition={"MaxRuntimeInSeconds": 300, "MaxWaitTimeInSeconds": 600},
    )
    with pytest.raises(sm.exceptions.ResourceLimitExceeded) as info:
        sm.create_training_job(**req)
    assert "'ml.p3.2xlarge for spot training job usage'" in str(info.value)
    bad = {"kind": "capacity", "machine": "ml.p3.2xlarge", "at": "queue"}
    with pytest.raises(ControlError, match="400.*provision"):
        control.add_faults(bad)


def test_delayed_logs(
    sm: Any, logs: Any, ctl: FakeControl, request_for: Callable[..., dict[str, Any]]
) -> None:
    ctl.add_faults({"kind": "log_delay", "seconds": 3600})
    req = request_for("ok")
    name = req["TrainingJobName"]
    sm.create_training_job(**req)
    finished(sm, name)
    assert not any(log_lines(logs, name).values())
    ctl.clear_faults()

    def released() -> bool:
        return any("to stderr" in v for v in log_lines(logs, name).values())

    wait_for(released, 15, "the delayed stderr line")


# --- refusals ------------------------------------------------------------------------------


def _raw_client(aws: dict[str, Any]) -> Any:
    """No client-side validation: the fake alone must refuse."""
    return _client(aws, "sagemaker", parameter_validation=False, retries={"total_max_attempts": 1})


REFUSALS: dict[str, tuple[Callable[[dict[str, Any]], None], str, str]] = {
    "name pattern": (
        lambda r: r.update(TrainingJobName="bad_name!"),
        "ValidationException",
        "at 'trainingJobName' failed to satisfy constraint: Member must satisfy regular "
        "expression pattern: [a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}",
    ),
    "name too long": (
        lambda r: r.update(TrainingJobName="a" * 64),
        "ValidationException",
        "Member must have length less than or equal to 63",
    ),
    "unknown instance type": (
        lambda r: r["ResourceConfig"].update(InstanceType="ml.m5.huge"),
        "ValidationException",
        "Value 'ml.m5.huge' at 'resourceConfig.instanceType' failed to satisfy constraint: "
        "Member must satisfy enum value set: [",
    ),
    "environment value too long": (
        lambda r: r["Environment"].update(BIG="x" * 513),
        "ValidationException",
        "at 'environment' failed to satisfy constraint: Map value must satisfy constraint: "
        "[Member must have length less than or equal to 512]",
    ),
    "too many environment entries": (
        lambda r: r["Environment"].update({f"K{i}": "v" for i in range(100)}),
        "ValidationException",
        "at 'environment' failed to satisfy constraint: Member must have length less than or "
        "equal to 100",
    ),
    "bad environment key": (
        lambda r: r["Environment"].update({"1BAD": "v"}),
        "ValidationException",
        "Member must satisfy regular expression pattern: [a-zA-Z_][a-zA-Z0-9_]*",
    ),
    "missing role": (
        lambda r: r.pop("RoleArn"),
        "ValidationException",
        "Value null at 'roleArn' failed to satisfy constraint: Member must not be null",
    ),
    "missing resource config": (
        lambda r: r.pop("ResourceConfig"),
        "ValidationException",
        "Value null at 'resourceConfig' failed to satisfy constraint: Member must not be null",
    ),
    "missing instance type": (
        lambda r: r["ResourceConfig"].pop("InstanceType"),
        "ValidationException",
        "Value null at 'resourceConfig.instanceType'",
    ),
    "bad input mode": (
        lambda r: r["AlgorithmSpecification"].update(TrainingInputMode="Stream"),
        "ValidationException",
        "at 'algorithmSpecification.trainingInputMode' failed to satisfy constraint: Member "
        "must satisfy enum value set: [Pipe, File, FastFile]",
    ),
    "bad compression": (
        lambda r: r["OutputDataConfig"].update(CompressionType="ZIP"),
        "ValidationException",
        "at 'outputDataConfig.compressionType' failed to satisfy constraint: Member must "
        "satisfy enum value set: [GZIP, NONE]",
    ),
    "bad channel name": (
        lambda r: r["InputDataConfig"][0].update(ChannelName="a b"),
        "ValidationException",
        "at 'inputDataConfig.1.member.channelName'",
    ),
    "zero instances": (
        lambda r: r["ResourceConfig"].update(InstanceCount=0),
        "ValidationException",
        "at 'resourceConfig.instanceCount'",
    ),
    "max wait without spot": (
        lambda r: r["StoppingCondition"].update(MaxWaitTimeInSeconds=600),
        "ValidationException",
        "only supported when EnableManagedSpotTraining is set to true",
    ),
    "max wait below max runtime": (
        lambda r: r.update(
            EnableManagedSpotTraining=True,
            StoppingCondition={"MaxRuntimeInSeconds": 600, "MaxWaitTimeInSeconds": 60},
        ),
        "ValidationException",
        "must be greater than or equal to MaxRuntimeInSeconds",
    ),
    "spot without max wait": (
        lambda r: r.update(EnableManagedSpotTraining=True),
        "ValidationException",
        "Invalid MaxWaitTimeInSeconds",
    ),
    "image not in registry": (
        lambda r: r["AlgorithmSpecification"].update(
            TrainingImage="127.0.0.1:5000/stepop/nowhere:v1"
        ),
        "ValidationException",
        "Cannot find the requested image: 127.0.0.1:5000/stepop/nowhere:v1 with tag: v1",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refusals(
    aws: dict[str, Any], request_for: Callable[..., dict[str, Any]], case: str
) -> None:
    mutate, code, message = REFUSALS[case]
    req = json.loads(json.dumps(request_for("ok")))
    mutate(req)
    with pytest.raises(ClientError) as err:
        _raw_client(aws).create_training_job(**req)
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert err.value.response["Error"]["Code"] == code
    assert message in err.value.response["Error"]["Message"]
    if "TrainingJobName" in req and isinstance(req["TrainingJobName"], str):
        with pytest.raises(ClientError):
            _raw_client(aws).describe_training_job(TrainingJobName=req["TrainingJobName"])


def test_duplicate_name_is_resource_in_use(
    sm: Any, request_for: Callable[..., dict[str, Any]]
) -> None:
    req = request_for("ok")
    sm.create_training_job(**req)
    with pytest.raises(ClientError) as err:
        sm.create_training_job(**req)
    assert err.value.response["Error"]["Code"] == "ResourceInUse"
    assert "already exists" in err.value.response["Error"]["Message"]
    finished(sm, req["TrainingJobName"])


def test_unknown_job_is_not_found(sm: Any) -> None:
    with pytest.raises(ClientError) as err:
        sm.describe_training_job(TrainingJobName="never-created")
    assert err.value.response["Error"]["Code"] == "ValidationException"
    assert err.value.response["Error"]["Message"] == "Requested resource not found."


def test_ecr_uri_maps_to_the_local_registry(
    sm: Any, request_for: Callable[..., dict[str, Any]], registry_image: str
) -> None:
    repo = registry_image.split("/", 1)[1]
    ecr = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/{repo}"
    req = request_for("ok")
    req["AlgorithmSpecification"]["TrainingImage"] = ecr
    sm.create_training_job(**req)
    d = finished(sm, req["TrainingJobName"])
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    assert d["AlgorithmSpecification"]["TrainingImage"] == ecr


def test_a_jobs_own_mode_is_its_stepop_fake_mode_tag(
    sm: Any, request_for: Callable[..., dict[str, Any]]
) -> None:
    """As the Vertex AI and Azure ML fakes read a label or tag; a mode there is none of fails
    the job and names the tag."""
    req = request_for("ok", Tags=[{"Key": "stepop_fake_mode", "Value": "fast"}])
    sm.create_training_job(**req)
    d = finished(sm, req["TrainingJobName"])
    assert d["TrainingJobStatus"] == "Failed"
    assert "stepop_fake_mode='fast': use one of process, container, timer" in d["FailureReason"]


# --- container mode ------------------------------------------------------------------------


@pytest.mark.container
def test_container_mode_runs_the_image(
    sm: Any,
    s3: Any,
    bucket: str,
    ctl: FakeControl,
    docker_engine: Any,
    request_for: Callable[..., dict[str, Any]],
) -> None:
    rc = {"InstanceType": "ml.m5.large", "InstanceCount": 2, "VolumeSizeInGB": 5}
    req = request_for("ok", ResourceConfig=rc)
    name = req["TrainingJobName"]
    with ctl.in_mode("container"):
        sm.create_training_job(**req)
        d = finished(sm, name, timeout=120)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    assert _read(s3, bucket, f"output/{name}/output/model/sub/sum.txt") == b"10 algo-1"
    left = docker_engine.containers.list(all=True, filters={"label": f"stepop.job={name}"})
    assert left == []
