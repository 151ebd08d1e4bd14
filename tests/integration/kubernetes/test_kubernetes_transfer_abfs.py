"""A pod's artifacts on an abfs:// root: what the worker signs with the account key, and the
pod's entry script downloading with blob SAS URLs and uploading under a directory SAS, against
Azurite behind the emulated ADLS Gen2 front (``cloud.azure_dfs``: it checks a directory SAS as
ADLS Gen2 does; Azurite checks the blob SAS)."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qs, urlencode

import pytest
from azure.storage.blob import BlobServiceClient

from airflow_stepop.backends.kubernetes import entry, signers
from airflow_stepop.backends.kubernetes.signers_azure import AzureSigner
from airflow_stepop.setting_values import SettingsError
from cloud.azure_dfs import serve
from cloud.stack import free_port
from tests.integration.kubernetes.transfer_round_trip import round_trip

CONTAINER = "stepop-transfer-abfs"
ROOT = f"abfs://{CONTAINER}/stepop"
RUN = f"{ROOT}/runs/dag/run/task/-1/1"
CONN = "adls_transfer_test"  # its own: filesystems are cached per connection id


@pytest.fixture(scope="module")
def emulated():
    running = serve("127.0.0.1", free_port(), free_port())
    try:
        client = BlobServiceClient.from_connection_string(running.connection_string)
        yield client.create_container(CONTAINER), running
    finally:
        running.stop()


@pytest.fixture
def adls_connection(emulated, monkeypatch):
    _, running = emulated
    conn = {"conn_type": "adls", "extra": {"connection_string": running.connection_string}}
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}", json.dumps(conn))


def put(container, uri: str, data: bytes) -> None:
    container.upload_blob(uri.removeprefix(f"abfs://{CONTAINER}/"), data, overwrite=True)


def get(container, key: str) -> bytes:
    return container.download_blob(key).readall()


def test_a_pod_fetches_its_files_and_uploads_its_results_with_sas_urls(
    emulated, adls_connection, tmp_path: Path
):
    container, running = emulated

    document = round_trip(ROOT, CONN, lambda uri, data: put(container, uri, data), tmp_path)

    urls = [d["url"] for d in document["downloads"]]
    assert all(u.startswith(running.endpoint) and "sr=b" in u and "sp=r&" in u for u in urls)
    grant = document["uploads"]["output"]
    sas = parse_qs(grant["query"])
    assert grant["kind"] == "put" and sas["sr"] == ["d"] and sas["sp"] == ["cw"]
    assert sas["sdd"] == [str(len(grant["prefix"].strip("/").split("/")))]


def test_the_upload_grant_writes_only_under_its_directory_and_only_as_signed(
    emulated, adls_connection, tmp_path: Path
):
    container, _ = emulated
    grant = signers.signer_for(ROOT, CONN).upload_grant(f"{RUN}/output", 600)
    local = tmp_path / "model.bin"
    local.write_bytes(b"weights")

    entry.upload(grant, "model.bin", str(local))  # under the directory: stored
    assert get(container, f"{grant['prefix']}model.bin") == b"weights"

    elsewhere = {**grant, "prefix": RUN.removeprefix(f"abfs://{CONTAINER}/") + "/other/"}
    with pytest.raises(entry.TransferError, match=r"HTTP 403 [A-Za-z]+$"):
        entry.upload(elsewhere, "forged.json", str(local))
    sas = {k: v[0] for k, v in parse_qs(grant["query"]).items()}
    widened = {**grant, "prefix": "stepop/", "query": urlencode({**sas, "sdd": "1"})}
    with pytest.raises(entry.TransferError, match=r"HTTP 403 Authentication"):  # a wider directory
        entry.upload(widened, "forged.json", str(local))
    more = {**grant, "query": urlencode({**sas, "sp": "rcwdl"})}
    with pytest.raises(entry.TransferError, match=r"HTTP 403 Authentication"):  # more rights
        entry.upload(more, "forged.json", str(local))
    assert not container.get_blob_client("stepop/forged.json").exists()
    assert not container.get_blob_client(f"{grant['prefix']}forged.json").exists()

    small = {**grant, "max_bytes": 3}
    with pytest.raises(entry.TransferError, match="model.bin: it is 7 bytes, more than one"):
        entry.upload(small, "model.bin", str(local))


def test_an_account_without_a_hierarchical_namespace_is_refused_before_any_job(
    emulated, adls_connection, monkeypatch
):
    _, running = emulated  # Azurite itself, without the front: a plain Blob Storage account
    conn = {"conn_type": "adls", "extra": {"connection_string": running.plain_connection_string}}
    monkeypatch.setenv("AIRFLOW_CONN_ADLS_PLAIN_TEST", json.dumps(conn))
    signer = signers.signer_for(ROOT, "adls_plain_test")
    with pytest.raises(SettingsError, match="has no hierarchical namespace") as refused:
        signer.upload_grant(f"{RUN}/output", 600)
    assert "'devstoreaccount1'" in str(refused.value)
    assert signers.signer_for(ROOT, CONN).upload_grant(f"{RUN}/output", 600)["kind"] == "put"


def test_credentials_that_cannot_sign_are_refused_naming_the_connection(monkeypatch):
    conn = {"conn_type": "adls", "extra": {"account_name": "stepopaccount", "anon": True}}
    monkeypatch.setenv("AIRFLOW_CONN_ADLS_ANONYMOUS_TEST", json.dumps(conn))
    with pytest.raises(SettingsError) as refused:
        signers.signer_for("abfs://data/stepop", "adls_anonymous_test")
    message = str(refused.value)
    assert "'adls_anonymous_test'" in message and "cannot sign" in message
    assert "account key" in message and "user delegation key" in message


class NoToken(Exception):
    """Not an Azure error: the pipeline does not retry it."""


class StandInCredential:
    """An Entra ID credential that records the scopes asked for and gets no token (so no
    request leaves the process)."""

    def __init__(self) -> None:
        self.scopes: list[str] = []

    async def get_token(self, *scopes: str, **kwargs: object) -> object:
        self.scopes += scopes
        raise NoToken("stand-in: no token")

    async def close(self) -> None:
        pass


def test_an_entra_id_credential_signs_with_a_user_delegation_key():
    from adlfs import AzureBlobFileSystem

    credential = StandInCredential()
    fs = AzureBlobFileSystem(account_name="stepopaccount", credential=credential,
                             skip_instance_cache=True)  # fmt: skip
    signer = AzureSigner(fs, "adls_entra_test")  # no key: a user delegation key is needed

    with pytest.raises(SettingsError) as refused:
        signer.get_url("abfs://data/stepop/code.zip", 600)

    assert credential.scopes == ["https://storage.azure.com/.default"]  # asked once, for Storage
    message = str(refused.value)
    assert "'adls_entra_test' could not get a user delegation key" in message
    assert "'stepopaccount'" in message and "Storage Blob Data Contributor" in message
