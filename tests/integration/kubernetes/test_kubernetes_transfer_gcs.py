"""A pod's artifacts on a gs:// root: what the worker signs with a service-account key, and the
pod's entry script downloading with V4 URLs and uploading under the V4 POST policy, against the
emulated GCS (``cloud.gcs``: it checks the policy's signature and conditions as GCS does)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage as gcs

from airflow_stepop.backends.kubernetes import entry, signers
from airflow_stepop.setting_values import SettingsError
from cloud.gcs import server
from cloud.gcs.signer import connection, write_key
from cloud.stack import free_port
from tests.integration.kubernetes.transfer_round_trip import round_trip

BUCKET = "stepop-transfer-gcs"
ROOT = f"gs://{BUCKET}/stepop"
RUN = f"{ROOT}/runs/dag/run/task/-1/1"
CONN = "google_transfer_test"  # its own: filesystems are cached per connection id


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    key_file = tmp_path_factory.mktemp("gcs") / "signer.json"
    info = write_key(key_file, token_uri=f"{endpoint}/token")
    running = server("127.0.0.1", port, key_file)
    client = gcs.Client(project="stepop-local", credentials=AnonymousCredentials(),
                        client_options={"api_endpoint": endpoint})  # fmt: skip
    bucket = client.create_bucket(BUCKET)
    yield bucket, endpoint, info
    running.stop()


@pytest.fixture
def google_connection(emulated, monkeypatch):
    _, endpoint, info = emulated
    conn = json.loads(connection(info, "stepop-local"))
    conn["extra"]["gcs.endpoint"] = endpoint
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}", json.dumps(conn))


def put(bucket, uri: str, data: bytes) -> None:
    bucket.blob(uri.removeprefix(f"gs://{BUCKET}/")).upload_from_string(data)


def get(bucket, key: str) -> bytes:
    return bucket.blob(key).download_as_bytes()


def test_a_pod_fetches_its_files_and_uploads_its_results_with_signed_urls(
    emulated, google_connection, tmp_path: Path
):
    bucket, endpoint, _ = emulated

    document = round_trip(ROOT, CONN, lambda uri, data: put(bucket, uri, data), tmp_path)

    urls = [d["url"] for d in document["downloads"]]
    assert all(u.startswith(endpoint) and "X-Goog-Signature=" in u for u in urls)
    assert document["uploads"]["output"]["kind"] == "post"


def test_the_upload_grant_writes_only_under_its_prefix_and_only_as_signed(
    emulated, google_connection, tmp_path: Path
):
    bucket, _, _ = emulated
    grant = signers.signer_for(ROOT, CONN).upload_grant(f"{RUN}/output", 600)
    local = tmp_path / "model.bin"
    local.write_bytes(b"weights")

    entry.upload(grant, "model.bin", str(local))  # under the prefix: stored
    assert get(bucket, f"{grant['prefix']}model.bin") == b"weights"

    elsewhere = {**grant, "prefix": RUN.removeprefix(f"gs://{BUCKET}/") + "/other/"}
    with pytest.raises(entry.TransferError, match="HTTP 403 AccessDenied$"):
        entry.upload(elsewhere, "result.json", str(local))
    policy = json.loads(base64.b64decode(grant["fields"]["policy"]))
    policy["conditions"][1][2] = ""  # widened to the whole bucket, with the old signature
    widened = base64.b64encode(json.dumps(policy).encode()).decode()
    forged = {**grant, "prefix": "", "fields": {**grant["fields"], "policy": widened}}
    with pytest.raises(entry.TransferError, match="HTTP 403 SignatureDoesNotMatch$"):
        entry.upload(forged, "result.json", str(local))
    assert not bucket.blob("result.json").exists()


def test_credentials_that_cannot_sign_are_refused_naming_the_connection(monkeypatch):
    conn = {"conn_type": "google_cloud_platform", "extra": {"is_anonymous": True}}
    monkeypatch.setenv("AIRFLOW_CONN_GOOGLE_ANONYMOUS_TEST", json.dumps(conn))
    with pytest.raises(SettingsError) as refused:
        signers.signer_for(ROOT, "google_anonymous_test")
    message = str(refused.value)
    assert "'google_anonymous_test'" in message and "cannot sign" in message
    assert "keyfile_dict" in message and "serviceAccountTokenCreator" in message


def test_a_workers_own_service_account_signs_as_itself_through_iam():
    from google.auth import compute_engine, impersonated_credentials

    email = "composer-worker@my-project.iam.gserviceaccount.com"
    own = compute_engine.Credentials(  # a VM's, GKE's, Composer's
        service_account_email=email, universe_domain="googleapis.com"
    )

    signing = signers.signing_credentials(own, "google_cloud_default")

    assert isinstance(signing, impersonated_credentials.Credentials)
    assert signing.signer_email == email  # URLs and policies name the worker's own account
