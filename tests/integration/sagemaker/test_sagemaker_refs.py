"""A SageMaker step's artifact references read with the step's connection, wherever loaded.

On a real worker the AWS credentials often exist only in the Airflow connection: a plain task
downstream of a step calls ``ref.load()`` without naming it.
"""

from __future__ import annotations

import json

import pytest
from s3fs import S3FileSystem

from airflow_stepop import ArtifactRef
from airflow_stepop.artifacts.storage import worker_storage
from airflow_stepop.runtime import values

AMBIENT = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_PROFILE",
)


@pytest.fixture
def connection_only(aws, monkeypatch, tmp_path):
    """Credentials only in ``aws_default``; no store or filesystem made before this test."""
    for name in AMBIENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setattr("airflow.sdk.io.store._STORE_CACHE", {})
    S3FileSystem.clear_instance_cache()
    return aws


def test_a_reference_from_xcom_loads_with_the_connection_that_wrote_it(connection_only):
    from airflow.sdk.serde import deserialize, serialize

    value = {"weights": list(range(1000))}
    storage = worker_storage("aws_default")
    record = values.write_artifact(value, f"{connection_only['root']}/refs/a", storage)
    written = ArtifactRef.from_record(record, "aws_default")  # as a step's result manifest is read

    stored = json.loads(json.dumps(serialize(written)))  # what XCom keeps
    assert stored["__data__"]["conn_id"] == "aws_default"
    assert "testing" not in json.dumps(stored)  # the connection's name, never its secret

    loaded = deserialize(stored)  # a plain @task downstream, naming no connection
    assert loaded.load() == value
    assert "conn_id" not in loaded.to_record()  # a job reads with its own credentials


def test_an_empty_directory_comes_back_from_s3(aws, tmp_path):
    """S3 keeps no empty directory: the reference alone says the step returned one."""
    empty = tmp_path / "no-files-yet"
    empty.mkdir()
    storage = worker_storage("aws_default")
    record = values.write_artifact(empty, f"{aws['root']}/refs/checkpoint", storage)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "weights.bin").write_bytes(b"w")
    full = values.write_artifact(tmp_path / "full", f"{aws['root']}/refs/trained", storage)

    loaded = ArtifactRef.from_record(record, "aws_default").load()

    assert loaded.is_dir() and not any(loaded.iterdir())
    # named as a tree with files is: after the artifact, not after what it holds
    assert loaded.name == "checkpoint"
    assert ArtifactRef.from_record(full, "aws_default").load().name == "trained"
