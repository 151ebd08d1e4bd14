"""The basic SageMaker lifecycle, run on the emulated cloud and (``--live``) on the real one.

Live needs AWS credentials and STEPOP_LIVE_AWS_ROLE_ARN, STEPOP_LIVE_AWS_BUCKET and
STEPOP_LIVE_AWS_IMAGE (an ECR image with python3); it is skipped otherwise.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

JOB_SCRIPT = Path(__file__).with_name("sagemaker_job.py")


def _setup(target: str, request: pytest.FixtureRequest) -> tuple[Any, Any, str, str, str]:
    """(sagemaker client, s3 client, bucket, role, image) for the target cloud."""
    if target == "live":
        s3, sm = boto3.client("s3"), boto3.client("sagemaker")
        env = os.environ
        return (sm, s3, env["STEPOP_LIVE_AWS_BUCKET"], env["STEPOP_LIVE_AWS_ROLE_ARN"],
                env["STEPOP_LIVE_AWS_IMAGE"])  # fmt: skip
    stack: dict[str, str] = request.getfixturevalue("cloud_stack")
    if "STEPOP_SAGEMAKER_ENDPOINT" not in stack:
        pytest.skip("the stack runs no SageMaker fake")
    image = request.getfixturevalue("registry_image")
    creds = {"region_name": "us-east-1", "aws_access_key_id": "testing",
             "aws_secret_access_key": "testing"}  # fmt: skip
    s3 = boto3.client("s3", endpoint_url=stack["STEPOP_MOTO_ENDPOINT"], **creds)
    sm = boto3.client("sagemaker", endpoint_url=stack["STEPOP_SAGEMAKER_ENDPOINT"], **creds)
    bucket = f"sm-lifecycle-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    return sm, s3, bucket, "arn:aws:iam::123456789012:role/stepop-selftest", image


def test_job_completes_with_its_model_in_s3(
    aws_target: str, request: pytest.FixtureRequest
) -> None:
    sm, s3, bucket, role, image = _setup(aws_target, request)
    prefix = f"stepop-selftest/{uuid.uuid4().hex[:8]}"
    s3.put_object(Bucket=bucket, Key=f"{prefix}/code/job.py", Body=JOB_SCRIPT.read_bytes())
    s3.put_object(Bucket=bucket, Key=f"{prefix}/train/numbers.txt", Body=b"5 6\n")
    name = f"stepop-selftest-{uuid.uuid4().hex[:12]}"
    channel = lambda n, p: {  # noqa: E731
        "ChannelName": n,
        "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{bucket}/{p}"}},
    }
    sm.create_training_job(
        TrainingJobName=name,
        RoleArn=role,
        AlgorithmSpecification={
            "TrainingImage": image,
            "TrainingInputMode": "File",
            "ContainerEntrypoint": ["python3", "/opt/ml/input/data/code/job.py"],
            "ContainerArguments": ["ok"],
        },
        Environment={"ML": "/opt/ml"},
        InputDataConfig=[channel("code", f"{prefix}/code"), channel("train", f"{prefix}/train")],
        OutputDataConfig={"S3OutputPath": f"s3://{bucket}/{prefix}/out", "CompressionType": "NONE"},
        ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 5},
        StoppingCondition={"MaxRuntimeInSeconds": 900},
    )
    deadline = time.monotonic() + (1800 if aws_target == "live" else 60)
    interval = 15.0 if aws_target == "live" else 0.05
    while time.monotonic() < deadline:
        d = sm.describe_training_job(TrainingJobName=name)
        if d["TrainingJobStatus"] in ("Completed", "Failed", "Stopped"):
            break
        time.sleep(interval)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    key = f"{prefix}/out/{name}/output/model/sub/sum.txt"
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"11 algo-1"
