"""Kubernetes steps on the emulated cluster of the stack, with moto's S3 as the artifact store.

The stack's Kubernetes fake runs each pod's container in a process (the plain base image) and
reaches moto on loopback, as a pod of a real cluster reaches S3 with the signed URLs.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from cloud.pytest_plugin import (  # noqa: F401 - fixtures and the `live` skip hook
    cloud_environ,
    cloud_stack,
    pytest_collection_modifyitems,
    registry_image,
)

DAGS = Path(__file__).parent / "dags"
BUNDLES = [
    {
        "name": "dags-folder",
        "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
        "kwargs": {},
    },
    {
        "name": "kubernetes-it",
        "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
        "kwargs": {"path": str(DAGS)},
    },
]


@pytest.fixture
def k8s(cloud_environ, registry_image, airflow_db, monkeypatch, tmp_path) -> dict[str, Any]:  # noqa: F811
    """The emulated cluster and S3 as a user's Airflow sees them: connections, artifact root."""
    import boto3

    if "AIRFLOW_CONN_KUBERNETES_DEFAULT" not in cloud_environ:
        pytest.fail("the stack runs no Kubernetes fake")
    bucket = "stepop-k8s-it"
    s3 = boto3.client("s3", endpoint_url=cloud_environ["AWS_ENDPOINT_URL"])
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
        s3.create_bucket(Bucket=bucket)
    root = f"s3://{bucket}/{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", root)
    monkeypatch.setenv("AIRFLOW__STEPOP__POLL_INTERVAL", "0.3")
    monkeypatch.setenv("STEPOP_TEST_RESULTS", str(tmp_path))
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps(BUNDLES))
    monkeypatch.syspath_prepend(str(DAGS))
    return {"root": root, "bucket": bucket, "s3": s3, "results": tmp_path,
            "fake": cloud_environ["STEPOP_KUBERNETES_ENDPOINT"]}  # fmt: skip


def dags() -> Any:
    """The test DAG file, imported afresh so module-level values see this test's env."""
    sys.modules.pop("kubernetes_step_dags", None)
    return importlib.import_module("kubernetes_step_dags")


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


def jobs_of(run: Any) -> list[dict[str, Any]]:
    """The cluster's Jobs of one DAG run, as the API has them (read with the official client)."""
    from kubernetes import client

    from airflow_stepop.backends.kubernetes.clients import read_access, sync_client
    from airflow_stepop.backends.kubernetes.manifest import label_value

    api = sync_client(read_access("kubernetes_default"))
    selector = f"stepop.io/run-id={label_value(run.run_id)},stepop.io/dag-id={run.dag_id}"
    jobs = client.BatchV1Api(api).list_job_for_all_namespaces(label_selector=selector)
    return [api.sanitize_for_serialization(job) for job in jobs.items]
