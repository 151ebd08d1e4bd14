"""Azure ML artifact roots: the forms taken at parse time and datastore paths resolved."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_stepop.backends.azureml.backend import AzureMLBackend
from airflow_stepop.backends.azureml.errors import AzureMLConfigError
from airflow_stepop.backends.azureml.roots import (
    Datastore,
    DatastoreCache,
    check_account,
    check_root,
    parse_datastore,
    read_datastore,
)
from airflow_stepop.hooks.azureml import Workspace
from airflow_stepop.settings import SettingsError

WS = Workspace("sub-1", "rg-1", "ws-1", "https://management.azure.com", True)
EVERY_FORM = ("abfs://mycontainer/stepop", "az://mycontainer/stepop",
              "azureml://datastores/workspaceblobstore/paths/stepop")  # fmt: skip


@pytest.mark.parametrize(
    "root",
    [
        "abfs://data/stepop",
        "abfss://data",
        "az://data/a/b",
        "abfs://my_wasb_conn@data/stepop",  # Airflow's form: a connection's credentials
        "azureml://datastores/workspaceblobstore/paths/stepop",
        "azureml://datastores/workspaceblobstore/paths",
        "azureml://subscriptions/sub-1/resourcegroups/rg-1/workspaces/ws-1/datastores/ds_2/paths/x",
    ],
)
def test_every_form_of_root_is_taken(root):
    check_root("AzureMLStepOperator", root)


@pytest.mark.parametrize(
    ("root", "says"),
    [
        ("gs://bucket/x", "is not an Azure artifact root"),
        ("file:///tmp/x", "is not an Azure artifact root"),
        ("abfs://data@acct.dfs.core.windows.net/x", "reads 'data@' as a connection id"),
        ("az://Bad_Container/x", "'Bad_Container' is not a Blob Storage container name"),
        ("azureml://datastores/workspaceblobstore/x", "is not a datastore path"),
        ("azureml://jobs/abc/outputs/x", "is not a datastore path"),
    ],
)
def test_a_bad_root_names_the_field_the_value_and_an_example_of_each_form(root, says):
    with pytest.raises(SettingsError) as err:
        check_root("AzureMLStepOperator", root)
    message = str(err.value)
    assert f"AzureMLStepOperator.artifact_root={root!r}" in message and says in message
    if "datastore path" in says:
        assert "'azureml://datastores/workspaceblobstore/paths/stepop'" in message
    elif "connection id" not in says:
        assert all(f"'{form}'" in message for form in EVERY_FORM)


def test_the_option_a_task_falls_back_to_is_named_as_such():
    with pytest.raises(SettingsError, match=r"Op: \[stepop\] artifact_root = 's3://b/x'"):
        check_root("Op", "s3://b/x", "[stepop] artifact_root")


def test_datastore_paths_short_and_long_form():
    short = parse_datastore("azureml://datastores/workspaceblobstore/paths/stepop/runs/")
    assert (short.name, short.path, short.workspace) == ("workspaceblobstore", "stepop/runs", None)
    long = parse_datastore(
        "azureml://subscriptions/s/resourceGroups/g/workspaces/w/datastores/d/paths/p"
    )
    assert (long.name, long.path, long.workspace) == ("d", "p", ("s", "g", "w"))
    assert long.job_uri == "azureml://datastores/d/paths/p"
    assert parse_datastore("abfs://data/x") is None


class Arm:
    """The workspace's datastore resources, as ARM answers them (counts the GETs)."""

    def __init__(self, datastores: dict[str, dict[str, Any]]) -> None:
        self.datastores = datastores
        self.gets: list[str] = []

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        from azure.core.exceptions import ResourceNotFoundError

        self.gets.append(path)
        name = path.rsplit("/", 1)[-1]
        if name not in self.datastores:
            raise ResourceNotFoundError(f"Datastore '{name}' not found.")
        return {"name": name, "properties": self.datastores[name]}


BLOB = {"datastoreType": "AzureBlob", "accountName": "acct", "containerName": "blobs"}
GEN2 = {"datastoreType": "AzureDataLakeGen2", "accountName": "acct", "filesystem": "lake"}
FILES = {"datastoreType": "AzureFile", "accountName": "acct", "fileShareName": "share"}


def backend(arm: Arm, monkeypatch: pytest.MonkeyPatch, worker_account: str | None = "acct"):
    """An Azure ML backend on ``arm`` whose worker storage reaches ``worker_account``."""
    import airflow_stepop.backends.azureml.backend as module
    import airflow_stepop.backends.azureml.roots as roots

    monkeypatch.setattr(roots, "DATASTORES", DatastoreCache())
    monkeypatch.setattr(module, "storage_account", lambda storage, uri: worker_account)
    made = AzureMLBackend("azureml_default")
    made.__dict__["arm"] = arm
    made.__dict__["hook"] = type("Hook", (), {"workspace": WS})()
    return made


def test_a_datastore_root_is_the_datastores_container_for_the_worker(monkeypatch):
    arm = Arm({"workspaceblobstore": BLOB, "lake": GEN2})
    aml = backend(arm, monkeypatch)
    assert aml.artifact_root("azureml://datastores/workspaceblobstore/paths/stepop/x") == (
        "abfs://blobs/stepop/x"
    )
    assert aml.artifact_root("azureml://datastores/workspaceblobstore/paths") == "abfs://blobs"
    long = (
        "azureml://subscriptions/SUB-1/resourcegroups/rg-1/workspaces/ws-1/datastores/lake/paths/p"
    )
    assert aml.artifact_root(long) == "abfs://lake/p"
    assert aml.artifact_root("az://data/stepop") == "az://data/stepop"  # as it is
    assert arm.gets == [f"{WS.path}/datastores/workspaceblobstore", f"{WS.path}/datastores/lake"]


@pytest.mark.parametrize(
    ("root", "says"),
    [
        ("azureml://datastores/nosuch/paths/x", "datastore 'nosuch', which the workspace does not"),
        ("azureml://datastores/files/paths/x", "of type AzureFile; artifacts need a Blob Storage"),
        (
            "azureml://subscriptions/sub-1/resourcegroups/rg-1/workspaces/other/datastores/"
            "workspaceblobstore/paths/x",
            "names workspace sub-1/rg-1/other, but connection 'azureml_default' is workspace",
        ),
    ],
)
def test_a_datastore_the_job_cannot_use_is_refused_with_the_fix(root, says, monkeypatch):
    aml = backend(Arm({"workspaceblobstore": BLOB, "files": FILES}), monkeypatch)
    with pytest.raises(AzureMLConfigError, match=says) as err:
        aml.artifact_root(root)
    assert "azureml://datastores/" in str(err.value)  # a form that works


def test_the_worker_must_reach_the_datastores_storage_account(monkeypatch):
    aml = backend(Arm({"workspaceblobstore": BLOB}), monkeypatch, worker_account="other")
    with pytest.raises(AzureMLConfigError, match="account 'acct', but the worker's Azure Storage"):
        aml.artifact_root("azureml://datastores/workspaceblobstore/paths/x")
    check_account(Datastore("d", "acct", "c"), None)  # the worker cannot tell: no refusal


def test_datastores_are_read_once_per_process():
    arm = Arm({"workspaceblobstore": BLOB})
    cache = DatastoreCache()
    expected = Datastore("workspaceblobstore", "acct", "blobs")
    for _ in range(3):
        assert cache.get(arm, WS.path, "workspaceblobstore") == expected
    assert len(arm.gets) == 1
    assert read_datastore(arm, WS.path, "workspaceblobstore").container == "blobs"


def test_az_urls_get_the_filesystem_and_credentials_abfs_gets(monkeypatch):
    from adlfs import AzureBlobFileSystem

    from airflow_stepop.artifacts.storage import worker_storage

    # Airflow keeps one store per scheme and connection, fsspec one instance per set of
    # arguments: those an earlier test of this process made (with another account's ambient
    # credentials) would answer instead of new ones
    monkeypatch.setattr("airflow.sdk.io.store._STORE_CACHE", {})
    AzureBlobFileSystem.clear_instance_cache()
    monkeypatch.setenv(
        "AZURE_STORAGE_CONNECTION_STRING",
        "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=a2V5;"
        "BlobEndpoint=http://127.0.0.1:1/acct;",
    )
    az_fs, az_path = worker_storage().resolver("az://data/stepop/x.npy")
    abfs_fs, _ = worker_storage().resolver("abfs://data/stepop/x.npy")
    assert type(az_fs) is type(abfs_fs) and type(az_fs).__name__ == "AzureBlobFileSystem"
    assert az_path == "data/stepop/x.npy"
    assert az_fs.service_client.account_name == "acct"  # the ambient credentials


def test_a_bad_service_root_names_the_option_it_came_from(monkeypatch):
    from airflow.sdk import DAG

    from airflow_stepop import AzureMLStepOperator

    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", "file:///tmp/stepop")
    monkeypatch.setenv("AIRFLOW__STEPOP__AZUREML_ARTIFACT_ROOT", "gs://b/x")
    with DAG("aml_root", schedule=None):
        op = AzureMLStepOperator(task_id="t", python_callable=dict, image_uri="python:3.11")
    with pytest.raises(SettingsError, match=r"\[stepop\] azureml_artifact_root = 'gs://b/x'"):
        op.make_backend()


def test_a_shared_root_of_another_store_points_at_the_azure_ml_option():
    with pytest.raises(SettingsError) as err:
        check_root("AzureMLStepOperator", "file:///data/stepop", "[stepop] artifact_root")
    assert "Or set [stepop] azureml_artifact_root to one" in str(err.value)
