"""Azure ML steps on the emulated cloud: the stack's Azurite and a private Azure ML fake.

Each test session starts its own Azure ML fake in this process (``cloud.azureml.serve``) against
the stack's Azurite, so its counters count only our calls, and points the ``azureml_default``
connection at it exactly as ``.cloud/env`` does for the stack's fake.
"""

from __future__ import annotations

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
CONTAINER = "azureml-blobstore"  # the fake workspace's default datastore container
BUNDLES = [
    {
        "name": "dags-folder",
        "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
        "kwargs": {},
    },
    {
        "name": "azureml-it",
        "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
        "kwargs": {"path": str(DAGS)},
    },
]


@pytest.fixture(scope="session")
def azureml_fake(
    cloud_stack: dict[str, str],  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Any]:
    from cloud import azureml

    server = azureml.serve(
        "127.0.0.1",
        0,
        storage_connection_string=cloud_stack["AZURE_STORAGE_CONNECTION_STRING"],
        tmp_base=str(tmp_path_factory.mktemp("aml-jobs")),
        tls_dir=str(tmp_path_factory.mktemp("aml-tls")),
    )
    try:
        yield server
    finally:
        server.shutdown()


@pytest.fixture
def ctl(azureml_fake: Any) -> FakeControl:
    control = FakeControl(azureml_fake.url)
    control.reset()
    control.mode("process")
    return control


def connection(fake: Any) -> dict[str, Any]:
    """The azure_ml connection of .cloud/env, pointed at this session's fake."""
    from cloud import azureml

    conn = json.loads(azureml.stack_env(fake.url, {})["AIRFLOW_CONN_AZUREML_DEFAULT"])
    conn["extra"]["endpoint"] = fake.https_url
    conn["extra"]["ca_bundle"] = fake.ca_bundle
    return conn


@pytest.fixture
def azure(cloud_environ, azureml_fake, airflow_db, monkeypatch, tmp_path) -> dict[str, Any]:  # noqa: F811
    """The emulated Azure as a user's Airflow sees it: connection and artifact root."""
    from azure.storage.blob import BlobServiceClient

    monkeypatch.setenv("AIRFLOW_CONN_AZUREML_DEFAULT", json.dumps(connection(azureml_fake)))
    root = f"abfs://{CONTAINER}/it-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", root)
    monkeypatch.setenv("AIRFLOW__STEPOP__POLL_INTERVAL", "0.3")
    monkeypatch.setenv("STEPOP_TEST_RESULTS", str(tmp_path))
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps(BUNDLES))
    monkeypatch.syspath_prepend(str(DAGS))
    storage = cloud_environ["AZURE_STORAGE_CONNECTION_STRING"]
    blobs = BlobServiceClient.from_connection_string(storage)
    return {
        "root": root,
        "blobs": blobs.get_container_client(CONTAINER),
        "env": cloud_environ,
        "fake": azureml_fake,
        "results": tmp_path,
    }


def dags() -> Any:
    """The test DAG file, imported afresh so module-level values see this test's env."""
    import importlib

    sys.modules.pop("azureml_step_dags", None)
    return importlib.import_module("azureml_step_dags")


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


def _ws_path() -> str:
    from cloud import azureml

    return (
        f"/subscriptions/{azureml.SUBSCRIPTION}/resourceGroups/{azureml.RESOURCE_GROUP}/providers/"
        f"Microsoft.MachineLearningServices/workspaces/{azureml.WORKSPACE}"
    )


def jobs(fake: Any, contains: str = "") -> list[dict[str, Any]]:
    """The fake's jobs (ARM resources) whose name contains ``contains``, oldest first."""
    import requests

    answer = requests.get(
        f"{fake.url}{_ws_path()}/jobs",
        params={"api-version": "2024-04-01", "listViewType": "All"},
        timeout=10,
    ).json()
    found = [j for j in answer["value"] if contains in j["name"]]
    return sorted(found, key=lambda j: j["systemData"]["createdAt"])


def run_details(fake: Any, name: str) -> dict[str, Any]:
    """Run history's details of a job (status, times, error)."""
    import requests

    url = f"{fake.url}/history/v1.0{_ws_path()}/runs/{name}/details"
    return requests.get(url, timeout=10).json()
