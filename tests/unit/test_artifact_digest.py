"""The chunked artifact digest: what it is, what it catches, and old references still load."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib

import fsspec
import numpy as np
import pytest

from airflow_stepop import ArtifactRef
from airflow_stepop.runtime import values
from airflow_stepop.runtime.digest import CHUNK_SIZE, CHUNKED, SHA256, digest_of, new_digest
from airflow_stepop.runtime.storage import Storage, read_hashed
from tests.unit.test_artifact_io import chunked_sha256

SIZES = [0, 1, CHUNK_SIZE - 1, CHUNK_SIZE, CHUNK_SIZE + 1, 3 * CHUNK_SIZE + 5]


@pytest.fixture(scope="module")
def blob() -> bytes:
    return os.urandom(3 * CHUNK_SIZE + 5)


@pytest.fixture
def storage() -> Storage:
    return Storage()


def _pieces(data: bytes, sizes: list[int]):
    """``data`` cut into pieces of the given sizes in turn (never aligned to chunks)."""
    start, i = 0, 0
    while start < len(data):
        yield data[start : start + sizes[i % len(sizes)]]
        start += sizes[i % len(sizes)]
        i += 1


@pytest.mark.parametrize("size", SIZES)
def test_the_chunked_digest_is_the_sha256_of_the_chunks_sha256s(size, blob):
    data = blob[:size]
    whole = new_digest(CHUNKED)
    whole.update(data)
    assert whole.hexdigest() == chunked_sha256(data)
    pieces = new_digest(CHUNKED)  # as a materializer writes: pieces of any size, in order
    for piece in _pieces(data, [3 * 2**20 + 7, 100, 5 * 2**20]):
        pieces.update(piece)
    assert pieces.hexdigest() == chunked_sha256(data)
    if size == 0:
        assert chunked_sha256(data) == hashlib.sha256(b"").hexdigest()


@pytest.mark.parametrize("size", SIZES)
def test_the_legacy_digest_is_the_plain_sha256(size, blob):
    digest = new_digest(SHA256)
    for piece in _pieces(blob[:size], [2 * 2**20 + 3, 10]):
        digest.update(piece)
    assert digest.hexdigest() == hashlib.sha256(blob[:size]).hexdigest()


@pytest.mark.parametrize("kind", [CHUNKED, SHA256])
@pytest.mark.parametrize("positional", [True, False])
def test_read_hashed_reads_the_bytes_once_and_hashes_them(kind, positional, blob, tmp_path):
    path = tmp_path / "f"
    path.write_bytes(blob + b"tail")
    size = len(blob)
    with open(path, "rb", buffering=0) as file:
        stream = file if positional else io.BufferedReader(_NoFileno(file))
        data, digest = read_hashed(stream, size, kind)
        assert stream.read() == b"tail"  # left just after the bytes it read
    expected = chunked_sha256(blob) if kind == CHUNKED else hashlib.sha256(blob).hexdigest()
    assert digest == expected and bytes(data) == blob


class _NoFileno(io.RawIOBase):
    """A stream without a file descriptor, like a remote fsspec file."""

    def __init__(self, file) -> None:
        self.file = file

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        return self.file.readinto(buffer)


def test_read_hashed_refuses_a_short_file(blob, tmp_path):
    path = tmp_path / "f"
    path.write_bytes(blob[: 2 * CHUNK_SIZE + 1])
    with open(path, "rb", buffering=0) as file, pytest.raises(EOFError):
        read_hashed(file, len(blob), CHUNKED)


def _legacy_record(path: pathlib.Path, ref: dict) -> dict:
    """The record an earlier release wrote for the same file: plain sha256, no digest_kind."""
    old = {k: v for k, v in ref.items() if k not in ("digest_kind", "conn_id")}
    old["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    return old


def test_references_of_earlier_releases_still_load_and_verify(tmp_path, storage):
    array = np.arange(CHUNK_SIZE // 8 * 2 + 3, dtype=np.float64)
    ref = values.write_artifact(array, f"file://{tmp_path}/a", storage)
    path = pathlib.Path(ref["uri"].removeprefix("file://"))
    old = _legacy_record(path, ref)
    np.testing.assert_array_equal(values.read_artifact(old, storage, tmp_path / "c"), array)
    path.write_bytes(path.read_bytes()[:-1] + b"\x01")
    with pytest.raises(values.ArtifactIntegrityError, match=r"\(sha256: expected"):
        values.read_artifact(old, storage, tmp_path / "c")


def test_an_xcom_of_an_earlier_release_loads(tmp_path, storage):
    """XComs of old runs live in users' databases: version 1, no digest_kind."""
    from airflow.sdk.serde import deserialize, serialize

    value = {"weights": list(range(50_000))}
    ref = ArtifactRef.from_record(values.write_artifact(value, f"file://{tmp_path}/a", storage))
    stored = json.loads(json.dumps(serialize(ref)))
    assert stored["__version__"] == 3 and stored["__data__"]["digest_kind"] == CHUNKED
    assert len(json.dumps(stored)) < 1024
    path = pathlib.Path(ref.uri.removeprefix("file://"))
    stored["__version__"] = 1
    stored["__data__"] = _legacy_record(path, stored["__data__"])
    old = deserialize(stored)
    assert old.digest_kind == SHA256 and old.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert old.load() == value


def _model_dir(root: pathlib.Path, blob: bytes) -> pathlib.Path:
    (root / "sub").mkdir(parents=True)
    (root / "weights.bin").write_bytes(blob)  # several chunks
    (root / "config.json").write_text('{"layers": 3}')
    (root / "sub" / "empty").write_bytes(b"")
    return root


def _tree_line(rel: str, data: bytes, file_digest: str) -> bytes:
    return f"{rel}\0{len(data)}\0{file_digest}\n".encode()


def test_a_directory_digest_covers_paths_sizes_and_chunked_file_digests(blob, tmp_path, storage):
    model = _model_dir(tmp_path / "model", blob)
    ref = values.write_artifact(model, f"file://{tmp_path}/out/model", storage)
    # a directory's own files (by name) before its subdirectories' (by name)
    files = [("config.json", b'{"layers": 3}'), ("weights.bin", blob), ("sub/empty", b"")]
    lines = b"".join(_tree_line(rel, data, chunked_sha256(data)) for rel, data in files)
    assert ref["digest_kind"] == CHUNKED and ref["size"] == len(blob) + 13
    assert ref["sha256"] == hashlib.sha256(lines).hexdigest()
    loaded = values.read_artifact(ref, storage, tmp_path / "c")
    assert (loaded / "weights.bin").read_bytes() == blob
    # the digest an earlier release recorded for the same tree (plain sha256 per file)
    old = {k: v for k, v in ref.items() if k != "digest_kind"}
    old_lines = b"".join(_tree_line(r, d, hashlib.sha256(d).hexdigest()) for r, d in files)
    old["sha256"] = hashlib.sha256(old_lines).hexdigest()
    assert digest_of(loaded, SHA256)[0] == old["sha256"]
    assert values.read_artifact(old, storage, tmp_path / "c") == loaded
    (loaded / "sub" / "empty").write_bytes(b"x")
    for record in (ref, old):
        with pytest.raises(values.ArtifactIntegrityError, match="does not match the digest"):
            values.read_artifact(record, storage, tmp_path / "c")


@pytest.fixture
def memory_root():
    fs = fsspec.filesystem("memory")
    root = f"memory://stepop-digest-{os.getpid()}"
    yield root
    fs.rm(root.removeprefix("memory://"), recursive=True)


@pytest.mark.parametrize("kind", ["file", "directory"])
def test_a_remote_artifact_is_verified_and_a_changed_one_refused(
    kind, blob, memory_root, tmp_path, storage
):
    value = blob if kind == "file" else _model_dir(tmp_path / "model", blob)
    ref = values.write_artifact(value, f"{memory_root}/out/v", storage)
    assert ref["uri"].startswith("memory://") and ref["digest_kind"] == CHUNKED
    back = values.read_artifact(ref, storage, tmp_path / "cache1")
    if kind == "file":
        assert back == blob
    else:
        assert (back / "weights.bin").read_bytes() == blob
    fs, path = fsspec.core.url_to_fs(ref["uri"])
    target = path if kind == "file" else path + "/weights.bin"
    data = bytearray(fs.cat_file(target))
    data[CHUNK_SIZE + 1] ^= 1
    fs.pipe_file(target, bytes(data))
    with pytest.raises(values.ArtifactIntegrityError, match="does not match the digest"):
        values.read_artifact(ref, storage, tmp_path / "cache2")


def test_an_unknown_digest_kind_is_a_clear_error_before_any_read(tmp_path, storage):
    ref = values.write_artifact(b"payload", f"file://{tmp_path}/a", storage)
    ref = {**ref, "digest_kind": "blake3", "uri": f"file://{tmp_path}/missing.bin"}
    with pytest.raises(ValueError, match=r"Unknown artifact digest kind 'blake3'.*upgrade"):
        values.read_artifact(ref, storage, tmp_path / "c")
