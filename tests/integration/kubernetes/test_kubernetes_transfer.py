"""A pod's artifacts through signed S3 URLs: what the worker signs, and the pod's entry script
downloading and uploading with them against an S3 emulator (moto, in this process)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from airflow_stepop.artifacts.storage import worker_storage
from airflow_stepop.backends.base import JobRequest
from airflow_stepop.backends.kubernetes import entry, signers, transfer
from cloud.stack import free_port
from tests.integration.kubernetes.transfer_round_trip import round_trip

BUCKET = "stepop-transfer"
ROOT = f"s3://{BUCKET}/stepop"
RUN = f"{ROOT}/runs/dag/run/task/-1/1"
CODE = b"PK\x05\x06" + b"\0" * 18  # an empty zip
CODE_URI = f"{ROOT}/code/{hashlib.sha256(CODE).hexdigest()}.zip"
# A connection of its own: filesystems are cached per connection id in the process, and another
# test's aws_default may point at another S3.
CONN = "aws_transfer_test"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    client.create_bucket(Bucket=BUCKET)
    yield client, endpoint
    server.stop()


@pytest.fixture
def aws_connection(s3, monkeypatch):
    _, endpoint = s3
    extra = {"endpoint_url": endpoint, "region_name": "us-east-1"}
    connection = {"conn_type": "aws", "login": "testing", "password": "testing", "extra": extra}
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}", json.dumps(connection))


def put(client, uri: str, data: bytes) -> None:
    client.put_object(Bucket=BUCKET, Key=uri.removeprefix(f"s3://{BUCKET}/"), Body=data)


def get(client, key: str) -> bytes:
    return client.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def test_a_pod_fetches_its_files_and_uploads_its_results_with_signed_urls(
    s3, aws_connection, tmp_path: Path
):
    client, _ = s3

    document = round_trip(ROOT, CONN, lambda uri, data: put(client, uri, data), tmp_path)

    for download in document["downloads"]:  # SigV4, which SSE-KMS buckets require
        assert "X-Amz-Algorithm=AWS4-HMAC-SHA256" in download["url"], download["url"]
    assert "x-amz-signature" in document["uploads"]["output"]["fields"]
    assert document["uploads"]["output"]["kind"] == "post"


def test_the_upload_grant_allows_only_keys_under_its_prefix_and_no_read(s3, aws_connection):
    # The emulator does not enforce a POST policy, so this reads what S3 would enforce.
    grant = signers.S3Signer(CONN).upload_grant(f"{RUN}/output", 600)
    policy = json.loads(base64.b64decode(grant["fields"]["policy"]))
    prefix = RUN.removeprefix(f"s3://{BUCKET}/") + "/output/"
    assert ["starts-with", "$key", prefix] in policy["conditions"]
    assert {"bucket": BUCKET} in policy["conditions"]
    assert ["content-length-range", 0, signers.MAX_OBJECT_BYTES] in policy["conditions"]
    assert "key" not in grant["fields"]  # the pod names each file under the prefix
    assert grant["prefix"] == prefix


def test_the_results_manifest_is_uploaded_after_everything_else(monkeypatch, tmp_path: Path):
    sent = []
    monkeypatch.setattr(entry, "upload", lambda grant, relative, path: sent.append(relative))
    for name in ("result.json", "a.txt", "outputs/z/b.bin", "error.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    entry.upload_tree({"kind": "post"}, str(tmp_path))
    assert sent[:2] == ["a.txt", "outputs/z/b.bin"]
    assert set(sent[2:]) == {"result.json", "error.json"}


def test_a_missing_input_is_named_before_any_job_starts(s3, aws_connection):
    request = JobRequest(job_name="j", task_key="k", spec_uri=f"{RUN}/spec.json", run_uri=RUN,
                         code_uri=CODE_URI)  # fmt: skip
    gone = f"{ROOT}/runs/dag/run/other/-1/1/outputs/return_value.npy"
    spec = {"args": [{"ref": {"uri": gone}}], "kwargs": {}}
    with pytest.raises(FileNotFoundError, match="return_value.npy"):
        transfer.plan(request, spec, worker_storage(CONN),
                      signers.S3Signer(CONN), output_uri=RUN, expires_s=60)  # fmt: skip


def test_a_failed_download_names_the_file_and_never_the_signed_url(tmp_path: Path, s3):
    _, endpoint = s3
    url = f"{endpoint}/{BUCKET}/nothing-here?X-Amz-Signature=0123secret"
    with pytest.raises(entry.TransferError) as failed:
        entry.download(url, str(tmp_path / "in" / "weights.bin"))
    assert "weights.bin" in str(failed.value) and "404" in str(failed.value)
    assert "secret" not in str(failed.value) and endpoint not in str(failed.value)


def test_a_key_that_would_lead_out_of_the_pods_directory_is_refused(s3, aws_connection):
    client, _ = s3
    planted = f"{ROOT}/runs/dag/run/bad/-1/1/outputs/model"
    put(client, f"{planted}/weights.bin", b"w")
    put(client, f"{planted}/../../../../../../../../usr/lib/python3/zz.pth", b"import os")
    request = JobRequest(job_name="j", task_key="k", spec_uri=f"{RUN}/spec.json", run_uri=RUN,
                         code_uri=CODE_URI)  # fmt: skip
    spec = {"args": [{"ref": {"uri": planted}}], "kwargs": {}}
    with pytest.raises(ValueError, match="outside its own directory"):
        transfer.plan(request, spec, worker_storage(CONN), signers.S3Signer(CONN),
                      output_uri=RUN, expires_s=60)  # fmt: skip


def test_the_entry_never_writes_outside_its_directory(tmp_path: Path):
    work = tmp_path / "work"
    assert entry.inside(str(work), "in/0/model.bin") == str(work / "in" / "0" / "model.bin")
    for escape in ("../outside", "in/../../outside", "/etc/passwd"):
        with pytest.raises(entry.TransferError, match="outside the step's directory"):
            entry.inside(str(work), escape)


def test_urls_signed_with_an_assumed_roles_session_say_when_that_session_ends(s3, monkeypatch):
    _, endpoint = s3
    extra = {"endpoint_url": endpoint, "region_name": "us-east-1",
             "role_arn": "arn:aws:iam::123456789012:role/stepop-worker",
             "assume_role_kwargs": {"DurationSeconds": 3600},
             "service_config": {"sts": {"endpoint_url": endpoint}}}  # fmt: skip
    connection = {"conn_type": "aws", "login": "testing", "password": "testing", "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_AWS_ROLE_TEST", json.dumps(connection))
    before = time.time()

    ends = signers.S3Signer("aws_role_test").credentials_end()

    assert ends is not None and before + 3500 <= ends <= time.time() + 3700
    assert signers.S3Signer(CONN).credentials_end() is None  # an IAM user's keys do not end


def test_a_queued_jobs_urls_outlive_any_wait_for_admission_up_to_a_signatures_longest():
    assert transfer.url_lifetime(3600, 1800) == 3600 + 1800 + 3600
    assert transfer.url_lifetime(3600, 1800, queued=True) == signers.MAX_EXPIRY_S
    assert transfer.url_lifetime(30 * 86400, 0) == signers.MAX_EXPIRY_S


def test_an_output_whose_name_is_not_utf8_is_named_and_nothing_is_sent(monkeypatch, tmp_path):
    sent = []
    monkeypatch.setattr(entry, "upload", lambda grant, relative, path: sent.append(relative))
    (tmp_path / "result.json").write_text("{}")
    with open(os.path.join(os.fsencode(tmp_path), b"weights-\xff.bin"), "wb") as file:
        file.write(b"w")
    with pytest.raises(entry.TransferError, match="is not UTF-8"):
        entry.upload_tree({"kind": "post"}, str(tmp_path))
    assert "result.json" not in sent  # the step does not say it ended
