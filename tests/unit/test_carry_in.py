"""A reference from another store reaches a step: a local step's file:// result given to a
cloud step (here a memory:// root stands for the cloud's object store), or the reverse."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import fsspec
import numpy as np
import pytest

from airflow_stepop import ArtifactRef
from airflow_stepop.packaging.staging import StepIdentity, same_store, stage_step
from airflow_stepop.runtime import values
from airflow_stepop.runtime.storage import Storage

STEP = StepIdentity("dag", "run", "train", -1, 1)


def first_rows(data):
    return data[:2]


@pytest.fixture
def cloud_root(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))  # the bundle cache's place
    root = f"memory://stepop-carry-{uuid.uuid4().hex[:8]}"
    yield root
    memory = fsspec.filesystem("memory")
    if memory.exists(root.removeprefix("memory://")):  # a refused step wrote nothing at all
        memory.rm(root.removeprefix("memory://"), recursive=True)


def _local_result(tmp_path: Path, value) -> ArtifactRef:
    """What a local step returned: an artifact under its file:// root."""
    record = values.write_artifact(value, f"file://{tmp_path}/a/out", Storage())
    return ArtifactRef.from_record(record)


def _spec_input(staged, storage: Storage) -> dict:
    return storage.read_json(staged.spec_uri)["args"][0]["ref"]


def test_a_local_artifact_given_to_a_cloud_step_is_copied_into_its_run(tmp_path, cloud_root):
    array = np.arange(3000, dtype="float64").reshape(1000, 3)
    ref, storage = _local_result(tmp_path, array), Storage()

    staged = stage_step(first_rows, [ref], {}, root=cloud_root, step=STEP, storage=storage)

    record = _spec_input(staged, storage)
    assert record["uri"].startswith(staged.run_uri + "/inputs/")  # the job's own store
    assert (record["sha256"], record["size"]) == (ref.sha256, ref.size)
    job_reads = values.read_artifact(record, storage, tmp_path / "job-cache")  # verified
    np.testing.assert_array_equal(job_reads, array)


def test_a_directory_artifact_is_copied_whole(tmp_path, cloud_root):
    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    (model / "weights.bin").write_bytes(b"\x01" * 5000)
    (model / "sub" / "config.json").write_text('{"layers": 3}')
    ref, storage = _local_result(tmp_path, model), Storage()

    staged = stage_step(first_rows, [ref], {}, root=cloud_root, step=STEP, storage=storage)

    record = _spec_input(staged, storage)
    assert record["uri"].startswith(staged.run_uri + "/inputs/")
    copied = values.read_artifact(record, storage, tmp_path / "job-cache")
    assert (copied / "weights.bin").read_bytes() == b"\x01" * 5000
    assert json.loads((copied / "sub" / "config.json").read_text()) == {"layers": 3}


def test_a_tampered_artifact_is_refused_before_the_step_is_staged(tmp_path, cloud_root):
    ref, storage = _local_result(tmp_path, {"weights": list(range(100))}), Storage()
    path = Path(ref.uri.removeprefix("file://"))
    path.write_bytes(path.read_bytes().replace(b"99", b"98"))

    with pytest.raises(values.ArtifactIntegrityError):
        stage_step(first_rows, [ref], {}, root=cloud_root, step=STEP, storage=storage)
    assert not fsspec.filesystem("memory").exists(cloud_root[9:])  # nothing uploaded, not even code


def test_an_artifact_in_the_step_s_own_store_is_passed_by_reference(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))
    ref, storage = _local_result(tmp_path, {"weights": list(range(100))}), Storage()

    staged = stage_step(
        first_rows, [ref], {}, root=f"file://{tmp_path}/b", step=STEP, storage=storage
    )

    assert _spec_input(staged, storage)["uri"] == ref.uri  # not copied: the job reads it there


@pytest.mark.parametrize(
    ("uri", "root", "same"),
    [
        ("s3://a/x", "s3://b/run", True),  # another bucket: the job's role reads it
        ("az://c/x", "abfs://c@acct.dfs.core.windows.net/run", True),  # fsspec's aliases
        ("gcs://a/x", "gs://a/run", True),
        ("/srv/a/x", "file:///srv/run", True),
        ("file:///srv/a/x", "s3://b/run", False),
        ("s3://a/x", "gs://b/run", False),
    ],
)
def test_which_stores_a_job_reads_as_its_own(uri, root, same):
    assert same_store(uri, root) is same
