"""Artifact roots other than abfs://, and MLflow inside a step, on the emulated cloud."""

from __future__ import annotations

import importlib
import json
import sys
import uuid

import pytest

from airflow_stepop import ArtifactRef
from tests.integration.azureml.conftest import CONTAINER, dags, jobs, xcoms


def root_dags():
    sys.modules.pop("azureml_root_dags", None)
    return importlib.import_module("azureml_root_dags")


def run_roots(azure, monkeypatch, root: str):
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", root)
    run = root_dags().aml_roots().test()
    assert run.state == "success"
    assert json.loads((azure["results"] / "roots.json").read_text()) == {
        "loaded": float(sum(range(50_000))),
        "total": float(sum(range(50_000))),
    }
    stored = xcoms(run)[("numbers", "return_value", -1)]
    assert len(json.dumps(stored)) < 1024
    return run, ArtifactRef.from_record(stored["__data__"])


@pytest.mark.parametrize("credentials", ["ambient", "connection"])
def test_an_az_root_passes_an_array_from_step_to_step(azure, ctl, monkeypatch, credentials):
    prefix = f"it-az-{uuid.uuid4().hex[:8]}"
    root = f"az://{CONTAINER}/{prefix}"
    if credentials == "connection":  # Airflow's form: the connection's credentials, no others
        secret = azure["env"]["AZURE_STORAGE_CONNECTION_STRING"]
        conn = {"conn_type": "wasb", "extra": {"connection_string": secret}}
        monkeypatch.setenv("AIRFLOW_CONN_STEPOP_BLOBS", json.dumps(conn))
        monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING")
        root = f"az://stepop_blobs@{CONTAINER}/{prefix}"
    _, ref = run_roots(azure, monkeypatch, root)
    assert ref.uri.startswith(root + "/") and "/result/" in ref.uri
    assert azure["blobs"].get_blob_client(ref.uri.split("/", 3)[3]).exists()
    job = jobs(azure["fake"], "aml-roots-total")[-1]["properties"]
    blob = f"https://devstoreaccount1.blob.core.windows.net/{CONTAINER}/{prefix}/"
    assert job["inputs"]["in1"]["uri"].startswith(blob)  # the upstream result, mounted
    assert job["outputs"]["result"]["uri"].startswith(blob)


def test_a_datastore_root_is_written_through_its_container(azure, ctl, monkeypatch):
    from airflow_stepop.backends.azureml import roots as azureml_roots

    monkeypatch.setattr(azureml_roots, "DATASTORES", azureml_roots.DatastoreCache())
    prefix = f"it-ds-{uuid.uuid4().hex[:8]}"
    _, ref = run_roots(
        azure, monkeypatch, f"azureml://datastores/workspaceblobstore/paths/{prefix}"
    )
    # the worker and later tasks read the datastore's container (azureml-blobstore)
    assert ref.uri.startswith(f"abfs://{CONTAINER}/{prefix}/") and "/result/" in ref.uri
    assert azure["blobs"].get_blob_client(ref.uri.split("/", 3)[3]).exists()
    job = jobs(azure["fake"], "aml-roots-total")[-1]["properties"]
    paths = f"azureml://datastores/workspaceblobstore/paths/{prefix}/"
    assert job["inputs"]["in1"]["uri"].startswith(paths)  # the job names data as Azure ML does
    assert job["inputs"]["code"]["uri"].startswith(paths)
    assert job["outputs"]["result"]["uri"].startswith(paths)
    assert ctl.counters()["Datastores_Get"] == 1  # read once for both steps


def test_a_root_the_job_cannot_use_fails_the_task_naming_the_fix(azure, ctl, monkeypatch):
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", "azureml://datastores/nosuch/paths/x")
    run = root_dags().aml_roots().test()
    assert run.state == "failed"
    failure = json.loads((azure["results"] / "failure.json").read_text())
    assert "names the datastore 'nosuch', which the workspace does not have" in failure
    assert "'azureml://datastores/workspaceblobstore/paths/stepop'" in failure
    assert "Jobs_CreateOrUpdate" not in ctl.counters()


@pytest.mark.parametrize(
    ("root", "says"),
    [
        ("gs://bucket/x", "'az://mycontainer/stepop' or 'azureml://datastores/"),
        ("abfs://data@acct.dfs.core.windows.net/x", "reads 'data@' as a connection id"),
    ],
)
def test_a_bad_configured_root_is_refused_before_any_api_call(azure, ctl, monkeypatch, root, says):
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", root)
    run = root_dags().aml_roots().test()
    assert run.state == "failed"
    failure = json.loads((azure["results"] / "failure.json").read_text())
    assert f"[stepop] artifact_root = {root!r}" in failure and says in failure
    assert ctl.counters() == {}


def test_mlflow_in_a_step_logs_into_the_jobs_run_under_its_experiment(azure, ctl):
    from mlflow.tracking import MlflowClient

    run = root_dags().aml_mlflow().test()
    assert run.state == "success"
    answer = xcoms(run)[("train", "return_value", -1)]
    assert answer["run_id"] == answer["job"]  # MLflow's active run is the Azure ML job
    job = jobs(azure["fake"], answer["job"])[-1]
    assert job["properties"]["experimentName"] == "stepop_mlflow_it"
    ws = job["id"].rsplit("/jobs/", 1)[0]
    client = MlflowClient(tracking_uri=f"{azure['fake'].url}/mlflow/v1.0{ws}")
    experiment = client.get_experiment_by_name("stepop_mlflow_it")
    logged = client.get_run(answer["job"])
    assert logged.info.experiment_id == experiment.experiment_id
    assert logged.data.params == {"learning_rate": "0.01"}
    assert [m.value for m in client.get_metric_history(answer["job"], "loss")] == [0.5, 0.25]


def test_a_missing_container_is_told_from_one_that_exists(azure):
    from airflow_stepop.artifacts.storage import missing_store, worker_storage

    storage = worker_storage(None)  # adlfs finds the emulator by AZURE_STORAGE_CONNECTION_STRING
    assert missing_store("abfs://no-such-container/steps", storage) == "abfs://no-such-container"
    assert missing_store(azure["root"], storage) is None


def test_a_missing_container_fails_the_task_naming_whose_credentials_looked(azure, ctl):
    """No Airflow connection reads an abfs:// root here: the error names what did."""
    run = dags().aml_missing_container().test()
    assert run.state == "failed"
    failure = (azure["results"] / "failure.json").read_text()
    assert (
        "'abfs://no-such-container-stepop/steps' is in abfs://no-such-container-stepop, " in failure
    )
    assert "which does not exist (or the worker's own credentials for it" in failure
    assert "AZURE_STORAGE_CONNECTION_STRING" in failure and "connection None" not in failure
    assert jobs(azure["fake"], "missing-container") == []
