"""SageMaker steps on the emulated cloud: moto (S3, ECR, STS, Logs) and a private SageMaker fake.

Each test session starts its own SageMaker fake in this process (``cloud.sagemaker.start``)
against the stack's moto and registry, so its counters count only our calls, and points the
``aws_default`` connection's ``service_config.sagemaker.endpoint_url`` at it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cloud.control import FakeControl
from cloud.pytest_plugin import (  # noqa: F401 - fixtures and the `live` skip hook
    cloud_environ,
    cloud_stack,
    docker_engine,
    pytest_collection_modifyitems,
    registry_image,
)

ROLE = "arn:aws:iam::123456789012:role/stepop-sagemaker"
DAGS = Path(__file__).parent / "dags"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
BUNDLES = [
    {
        "name": "dags-folder",
        "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
        "kwargs": {},
    },
    {
        "name": "sagemaker-it",
        "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
        "kwargs": {"path": str(DAGS)},
    },
]


@pytest.fixture(scope="session")
def sagemaker_fake(cloud_stack: dict[str, str]) -> Iterator[Any]:  # noqa: F811
    from cloud import sagemaker

    server = sagemaker.start(dict(cloud_stack))
    try:
        yield server
    finally:
        server.shutdown()


@pytest.fixture
def ctl(sagemaker_fake: Any) -> FakeControl:
    control = FakeControl(sagemaker_fake.url)
    control.reset()
    control.mode("process")
    return control


@pytest.fixture
def aws(cloud_environ, sagemaker_fake, airflow_db, monkeypatch, tmp_path) -> dict[str, Any]:  # noqa: F811
    """The emulated AWS as a user's Airflow sees it: connection, bucket, role, artifact root."""
    import boto3

    connection = json.loads(cloud_environ["AIRFLOW_CONN_AWS_DEFAULT"])
    connection["extra"]["service_config"]["sagemaker"]["endpoint_url"] = sagemaker_fake.url
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(connection))
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER", sagemaker_fake.url)
    bucket = "stepop-it"
    s3 = boto3.client("s3", endpoint_url=cloud_environ["AWS_ENDPOINT_URL"])
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
        s3.create_bucket(Bucket=bucket)
    root = f"s3://{bucket}/{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", root)
    monkeypatch.setenv("AIRFLOW__STEPOP__SAGEMAKER_ROLE", ROLE)
    monkeypatch.setenv("AIRFLOW__STEPOP__POLL_INTERVAL", "0.3")
    registry = cloud_environ.get("STEPOP_REGISTRY", "127.0.0.1:5000")
    monkeypatch.setenv("AIRFLOW__STEPOP__SAGEMAKER_IMAGE_REPOSITORY", f"{registry}/stepop-it-env")
    monkeypatch.setenv("AIRFLOW__STEPOP__BUILD_NETWORK_MODE", "host")  # the engine has no bridge
    if Path(CA_BUNDLE).exists():
        monkeypatch.setenv("AIRFLOW__STEPOP__BUILD_CA_BUNDLE", CA_BUNDLE)
    monkeypatch.setenv("STEPOP_TEST_RESULTS", str(tmp_path))
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps(BUNDLES))
    monkeypatch.syspath_prepend(str(DAGS))
    return {
        "root": root,
        "bucket": bucket,
        "s3": s3,
        "env": cloud_environ,
        "fake": sagemaker_fake.url,
        "registry": cloud_environ.get("STEPOP_REGISTRY", "127.0.0.1:5000"),
        "results": tmp_path,
    }


def dags() -> Any:
    """The test DAG file, imported afresh so module-level values see this test's env."""
    sys.modules.pop("sagemaker_step_dags", None)
    return importlib.import_module("sagemaker_step_dags")


def xcoms(run: Any) -> dict[tuple[str, str, int], Any]:
    """XCom values of one DAG run by (task_id, key, map_index)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(XComModel)
            .filter(XComModel.dag_id == run.dag_id, XComModel.run_id == run.run_id)
            .all()
        )
        return {(r.task_id, r.key, r.map_index): r.value for r in rows}


def training_jobs(contains: str = "") -> list[dict[str, Any]]:
    from airflow.providers.amazon.aws.hooks.sagemaker import SageMakerHook

    client = SageMakerHook(aws_conn_id="aws_default").conn
    summaries = client.list_training_jobs(NameContains=contains or "-", MaxResults=100)
    return [
        client.describe_training_job(TrainingJobName=s["TrainingJobName"])
        for s in summaries["TrainingJobSummaries"]
    ]


def wait_until(predicate, timeout: float = 60.0, interval: float = 0.1, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
