"""Artifact bytes are hashed as written and verified once on read: what that must still mean."""

from __future__ import annotations

import hashlib
import io
import pathlib

import numpy as np
import pytest

from airflow_stepop.runtime import values
from airflow_stepop.runtime.digest import CHUNK_SIZE, CHUNKED
from airflow_stepop.runtime.storage import Storage


def chunked_sha256(data: bytes) -> str:
    """The documented digest, computed the plain way: sha256 of the 8 MiB chunks' sha256s."""
    chunks = (data[i : i + 8 * 2**20] for i in range(0, len(data), 8 * 2**20))
    return hashlib.sha256(b"".join(hashlib.sha256(c).digest() for c in chunks)).hexdigest()


@pytest.fixture
def storage() -> Storage:
    return Storage()


def _file(ref) -> pathlib.Path:
    return pathlib.Path(ref["uri"].removeprefix("file://"))


@pytest.mark.parametrize("order", ["C", "F"])
def test_a_large_array_records_the_digest_of_the_file_it_wrote(order, tmp_path, storage):
    array = np.asarray(
        np.random.default_rng(1).random((2 * CHUNK_SIZE // 8 // 100 + 7, 100)), order=order
    )
    ref = values.write_artifact(array, f"file://{tmp_path}/out/big", storage)
    data = _file(ref).read_bytes()
    assert ref["digest_kind"] == CHUNKED
    assert ref["sha256"] == chunked_sha256(data) and ref["size"] == len(data)
    expected = io.BytesIO()
    np.save(expected, array, allow_pickle=False)
    assert data == expected.getvalue()  # any numpy reads it with np.load
    back = values.read_artifact(ref, storage, tmp_path / "cache")
    np.testing.assert_array_equal(back, array)
    back[0, 0] = -1.0  # a loaded array is the caller's to change


def test_large_bytes_roundtrip(tmp_path, storage):
    blob = bytes(range(256)) * (2 * CHUNK_SIZE // 256 + 3)
    ref = values.write_artifact(blob, f"file://{tmp_path}/out/blob", storage)
    assert ref["sha256"] == chunked_sha256(blob)
    assert values.read_artifact(ref, storage, tmp_path / "cache") == blob


@pytest.mark.parametrize("change", ["append", "truncate", "flip-last", "flip-middle-chunk"])
def test_a_changed_large_artifact_is_refused(change, tmp_path, storage):
    array = np.arange(3 * CHUNK_SIZE // 8 + 5, dtype=np.float64)
    ref = values.write_artifact(array, f"file://{tmp_path}/out/a", storage)
    path = _file(ref)
    data = bytearray(path.read_bytes())
    if change == "append":  # the recorded bytes are still all there, followed by more
        data += b"\x00" * 8
    elif change == "truncate":
        del data[-8:]
    elif change == "flip-last":
        data[-1] ^= 1
    else:  # one byte of one whole chunk in the middle: only that chunk's sha256 changes
        data[CHUNK_SIZE + 12345] ^= 1
    path.write_bytes(bytes(data))
    found = {"append": "a longer file", "truncate": "a shorter file"}.get(change, "[0-9a-f]{64}")
    with pytest.raises(
        values.ArtifactIntegrityError, match=f"does not match the digest.*found {found}"
    ):
        values.read_artifact(ref, storage, tmp_path / "cache")


class Unpicklable:
    def __reduce__(self):
        raise RuntimeError("cannot be pickled")


def test_a_value_that_fails_to_write_leaves_the_earlier_artifact_and_no_scratch(tmp_path, storage):
    first = values.write_artifact({"a": (1, 2)}, f"file://{tmp_path}/out/v", storage)
    before = _file(first).read_bytes()
    with pytest.raises(Exception, match="cannot be pickled"):
        values.write_artifact({"a": Unpicklable()}, f"file://{tmp_path}/out/v", storage)
    assert _file(first).read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [_file(first).name]


def test_a_directory_artifact_replaces_the_one_written_before(tmp_path, storage):
    for content in (b"old", b"new"):
        tree = tmp_path / f"model-{content.decode()}"
        (tree / "sub").mkdir(parents=True)
        (tree / "sub" / "weights.bin").write_bytes(content)
        ref = values.write_artifact(tree, f"file://{tmp_path}/out/model", storage)
    assert (_file(ref) / "sub" / "weights.bin").read_bytes() == b"new"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [_file(ref).name]


def test_a_failed_object_write_keeps_the_old_object_and_leaves_no_scratch(tmp_path, storage):
    uri = f"file://{tmp_path}/run/spec.json"
    storage.write_bytes(uri, b"{}")
    with pytest.raises(TypeError):
        storage.write_bytes(uri, "not bytes")  # type: ignore[arg-type]
    assert (tmp_path / "run" / "spec.json").read_bytes() == b"{}"
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["spec.json"]
