"""Vertex steps on the emulated cloud: gcp-storage-emulator (GCS) and a private Vertex fake.

Each test session starts its own Vertex fake in this process (``cloud.vertex.serve``) against
the stack's storage emulator, so its counters count only our calls, and points the
``google_cloud_default`` connection's ``vertex_endpoint`` and ``logging_endpoint`` extras at it.
"""

from __future__ import annotations

import importlib
import json
import sys
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

DAGS = Path(__file__).parent / "dags"
PROJECT = "stepop-it"
BUNDLES = [
    {
        "name": "dags-folder",
        "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
        "kwargs": {},
    },
    {
        "name": "vertex-it",
        "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
        "kwargs": {"path": str(DAGS)},
    },
]


@pytest.fixture(scope="session")
def vertex_fake(cloud_stack: dict[str, str], tmp_path_factory) -> Iterator[Any]:  # noqa: F811
    from cloud import vertex

    server = vertex.serve(
        "127.0.0.1", 0, gcs_emulator_host=cloud_stack["STORAGE_EMULATOR_HOST"],
        tmp_base=str(tmp_path_factory.mktemp("vertex-jobs")),
    )  # fmt: skip
    try:
        yield server
    finally:
        server.shutdown()


@pytest.fixture
def ctl(vertex_fake: Any) -> FakeControl:
    control = FakeControl(vertex_fake.url)
    control.reset()
    control.mode("process")
    return control


@pytest.fixture
def gcp(cloud_environ, vertex_fake, airflow_db, monkeypatch, tmp_path) -> dict[str, Any]:  # noqa: F811
    """The emulated Google Cloud as a user's Airflow sees it: connection, bucket, artifact root."""
    from cloud.vertex.gcs import storage_client

    connection = json.loads(cloud_environ["AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT"])
    connection["extra"].update(
        project=PROJECT, vertex_endpoint=vertex_fake.url, logging_endpoint=vertex_fake.url
    )
    monkeypatch.setenv("AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", json.dumps(connection))
    bucket = "stepop-vertex-it"
    gcs = storage_client(cloud_environ["STORAGE_EMULATOR_HOST"])
    if gcs.lookup_bucket(bucket) is None:
        gcs.create_bucket(bucket)
    root = f"gs://{bucket}/{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", root)
    monkeypatch.setenv("AIRFLOW__STEPOP__POLL_INTERVAL", "0.3")
    registry = cloud_environ.get("STEPOP_REGISTRY", "127.0.0.1:5000")
    monkeypatch.setenv("AIRFLOW__STEPOP__VERTEX_IMAGE_REPOSITORY", f"{registry}/stepop-vertex-it")
    monkeypatch.setenv("AIRFLOW__STEPOP__BUILD_NETWORK_MODE", "host")
    monkeypatch.setenv("STEPOP_TEST_RESULTS", str(tmp_path))
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps(BUNDLES))
    monkeypatch.syspath_prepend(str(DAGS))
    return {
        "root": root,
        "bucket": bucket,
        "gcs": gcs,
        "fake": vertex_fake.url,
        "registry": registry,
        "results": tmp_path,
    }


def dags() -> Any:
    """The test DAG file, imported afresh so module-level values see this test's env."""
    sys.modules.pop("vertex_step_dags", None)
    return importlib.import_module("vertex_step_dags")


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


def custom_jobs(fake_url: str, display_contains: str = "") -> list[dict[str, Any]]:
    """The fake's CustomJobs (newest first) as REST JSON, read with the official client."""
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform_v1

    client = aiplatform_v1.JobServiceClient(
        transport="rest",
        client_options=ClientOptions(api_endpoint=fake_url),
        credentials=AnonymousCredentials(),
    )
    parent = f"projects/{PROJECT}/locations/us-central1"
    jobs = client.list_custom_jobs(parent=parent)
    return [
        aiplatform_v1.CustomJob.to_dict(j, use_integers_for_enums=False)
        for j in jobs
        if display_contains in j.display_name
    ]
