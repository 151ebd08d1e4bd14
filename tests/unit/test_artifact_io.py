"""Artifact bytes are hashed as written and verified once on read: what that must still mean."""

from __future__ import annotations

import hashlib
import io
import pathlib

import numpy as np
import pytest

from airflow_stepop.runtime import values
from airflow_stepop.runtime.storage import OVERLAP_MIN, Storage


@pytest.fixture
def storage() -> Storage:
    return Storage()


def _file(ref) -> pathlib.Path:
    return pathlib.Path(ref["uri"].removeprefix("file://"))


@pytest.mark.parametrize("order", ["C", "F"])
def test_a_large_array_records_the_sha256_of_the_file_it_wrote(order, tmp_path, storage):
    array = np.asarray(
        np.random.default_rng(1).random((OVERLAP_MIN // 8 // 100 + 7, 100)), order=order
    )
    ref = values.write_artifact(array, f"file://{tmp_path}/out/big", storage)
    data = _file(ref).read_bytes()
    assert ref["sha256"] == hashlib.sha256(data).hexdigest() and ref["size"] == len(data)
    expected = io.BytesIO()
    np.save(expected, array, allow_pickle=False)
    assert data == expected.getvalue()  # any numpy reads it with np.load
    back = values.read_artifact(ref, storage, tmp_path / "cache")
    np.testing.assert_array_equal(back, array)
    back[0, 0] = -1.0  # a loaded array is the caller's to change


def test_large_bytes_roundtrip(tmp_path, storage):
    blob = bytes(range(256)) * (OVERLAP_MIN // 256 + 3)
    ref = values.write_artifact(blob, f"file://{tmp_path}/out/blob", storage)
    assert ref["sha256"] == hashlib.sha256(blob).hexdigest()
    assert values.read_artifact(ref, storage, tmp_path / "cache") == blob


@pytest.mark.parametrize("change", ["append", "truncate", "flip"])
def test_a_changed_large_artifact_is_refused(change, tmp_path, storage):
    array = np.arange(OVERLAP_MIN // 8 + 5, dtype=np.float64)
    ref = values.write_artifact(array, f"file://{tmp_path}/out/a", storage)
    path = _file(ref)
    data = bytearray(path.read_bytes())
    if change == "append":  # the recorded bytes are still all there, followed by more
        data += b"\x00" * 8
    elif change == "truncate":
        del data[-8:]
    else:
        data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(values.ArtifactIntegrityError, match="does not match the sha256"):
        values.read_artifact(ref, storage, tmp_path / "cache")
