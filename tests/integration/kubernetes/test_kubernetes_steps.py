"""Kubernetes steps end to end through dag.test() on the emulated cluster, s3:// artifacts."""

from __future__ import annotations

import json
import os
import uuid

from airflow_stepop import ArtifactRef
from tests.integration.kubernetes.conftest import dags, jobs_of, xcoms

ELEMENTS = 29 * 1024 * 1024 // 8
TOTAL = float(ELEMENTS * (ELEMENTS - 1) // 2)


def _read(results, name):
    return json.loads((results / f"{name}.json").read_text())


def test_an_array_and_a_model_directory_pass_between_steps_by_reference(k8s):
    run = dags().k8s_pipeline().test()
    assert run.state == "success"
    check = _read(k8s["results"], "check")
    assert check["parts"] == TOTAL and check["gpu_total"] == TOTAL
    assert check["model_files"] == ["config.json", "weights"]
    rows = xcoms(run)
    array = ArtifactRef.from_record(rows[("make_array", "return_value", -1)]["__data__"])
    assert array.uri.startswith(k8s["root"] + "/") and array.size >= 29 * 1024 * 1024
    model = ArtifactRef.from_record(rows[("save_model", "return_value", -1)]["__data__"])
    assert model.materializer == "path"
    assert all(len(json.dumps(value, default=str)) < 1024 for value in rows.values())

    jobs = jobs_of(run)
    assert len(jobs) == 5  # make_array, save_model, gpu_sum and two mapped shards
    by_task = {job["metadata"]["labels"]["stepop.io/task-id"]: job for job in jobs}
    gpu = by_task["gpu_sum"]["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert gpu["limits"] == {"nvidia.com/gpu": "1"}
    for job in jobs:  # no signed URL, no credential in a Job
        text = json.dumps(job)
        assert "X-Amz-Signature" not in text and "X-Amz-Credential" not in text


def test_a_raising_step_fails_with_its_exception_type_and_message(k8s):
    run = dags().k8s_raises().test()
    assert run.state == "failed"
    failure = _read(k8s["results"], "failure")
    assert "ValueError" in failure and "bad input -3: expected a positive count" in failure


def test_steps_on_a_gs_root_pass_a_model_directory_through_signed_urls(k8s, monkeypatch):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    endpoint = {"api_endpoint": os.environ["STORAGE_EMULATOR_HOST"]}
    client = storage.Client("stepop-local", AnonymousCredentials(), client_options=endpoint)
    bucket = client.bucket("stepop-k8s-gcs")
    if not bucket.exists():
        client.create_bucket(bucket)
    root = f"gs://stepop-k8s-gcs/{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("STEPOP_TEST_SIGNED_ROOT", root)
    monkeypatch.setenv("STEPOP_TEST_SIGNED_CONN", "google_cloud_signer")

    run = dags().k8s_signed_root().test()

    assert run.state == "success"
    result = _read(k8s["results"], "signed")
    assert result["uri"].startswith(root + "/") and result["weight"] == 1000.0
    written = {
        blob.name for blob in bucket.list_blobs(prefix=root.removeprefix("gs://stepop-k8s-gcs/"))
    }
    assert any(name.endswith("/outputs/return_value/weights/w.npy") for name in written)
    for job in jobs_of(run):  # no signed URL, no key in a Job
        text = json.dumps(job)
        assert "X-Goog-Signature" not in text and "PRIVATE KEY" not in text


def test_steps_on_an_abfs_root_pass_a_model_directory_through_sas_urls(k8s, monkeypatch):
    from azure.storage.blob import BlobServiceClient

    from cloud.azure_dfs import serve
    from cloud.stack import free_port

    adls = serve("127.0.0.1", free_port(), free_port())  # Azurite behind the ADLS Gen2 front
    try:
        container = BlobServiceClient.from_connection_string(adls.connection_string)
        container = container.create_container("stepop-k8s-abfs")
        conn = {"conn_type": "adls", "extra": {"connection_string": adls.connection_string}}
        monkeypatch.setenv("AIRFLOW_CONN_ADLS_K8S_TEST", json.dumps(conn))
        root = f"abfs://stepop-k8s-abfs/{uuid.uuid4().hex[:8]}"
        monkeypatch.setenv("STEPOP_TEST_SIGNED_ROOT", root)
        monkeypatch.setenv("STEPOP_TEST_SIGNED_CONN", "adls_k8s_test")

        run = dags().k8s_signed_root().test()

        assert run.state == "success"
        result = _read(k8s["results"], "signed")
        assert result["uri"].startswith(root + "/") and result["weight"] == 1000.0
        prefix = root.removeprefix("abfs://stepop-k8s-abfs/")
        written = {blob.name for blob in container.list_blobs(name_starts_with=prefix)}
        assert any(name.endswith("/outputs/return_value/weights/w.npy") for name in written)
        for job in jobs_of(run):  # no SAS, no account key in a Job
            text = json.dumps(job)
            assert "sig=" not in text and "AccountKey" not in text
    finally:
        adls.stop()
