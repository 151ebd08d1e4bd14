"""What the step cache notes of a cached result's artifacts, and where it refuses to look."""

from __future__ import annotations

import os
import uuid

import fsspec
import pytest

from airflow_stepop.artifacts import fingerprint as fingerprints
from airflow_stepop.artifacts.fingerprint import artifact_fingerprint as _fingerprint
from airflow_stepop.runtime.storage import Storage
from airflow_stepop.runtime.verified import EMPTY_TREE


def _ref(uri: str, **fields) -> dict:
    return {"uri": uri, "sha256": "ab" * 32, "size": 3, **fields}


def test_a_file_rewritten_with_other_bytes_of_the_same_size_changes_its_fingerprint(tmp_path):
    root = f"file://{tmp_path}"
    (tmp_path / "out.bin").write_bytes(b"abc")
    before = _fingerprint(Storage(), root, _ref(f"{root}/out.bin"))
    (tmp_path / "out.bin").unlink()
    (tmp_path / "out.bin").write_bytes(b"abd")
    assert before is not None and _fingerprint(Storage(), root, _ref(f"{root}/out.bin")) != before


def test_a_remote_object_rewritten_changes_its_fingerprint():
    root = f"memory://fp-{uuid.uuid4().hex[:8]}"
    memory = fsspec.filesystem("memory")
    memory.pipe_file(f"{root[9:]}/out.bin", b"abc")
    before = _fingerprint(Storage(), root, _ref(f"{root}/out.bin"))
    memory.pipe_file(f"{root[9:]}/out.bin", b"abd")
    assert _fingerprint(Storage(), root, _ref(f"{root}/out.bin")) != before
    memory.rm(root[9:], recursive=True)


@pytest.mark.parametrize(
    "where",
    ["file:///etc/passwd", "{root}/../elsewhere/out.bin", "{root}/a/./out.bin", "{root}"],
    ids=["another place", "a .. segment", "a . segment", "the root itself"],
)
def test_an_artifact_outside_the_artifact_root_is_never_looked_at(tmp_path, where):
    root = f"file://{tmp_path}/root"
    with pytest.raises(ValueError, match="is not under the artifact root"):
        _fingerprint(Storage(), root, _ref(where.format(root=root)))


def test_a_link_in_an_artifact_s_place_is_refused(tmp_path):
    (tmp_path / "root").mkdir()
    os.symlink("/usr", tmp_path / "root" / "model")
    with pytest.raises(ValueError, match="symbolic link"):
        _fingerprint(Storage(), f"file://{tmp_path}/root", _ref(f"file://{tmp_path}/root/model"))


def test_an_empty_directory_artifact_is_there_though_a_store_keeps_nothing_of_it(tmp_path):
    ref = _ref(f"file://{tmp_path}/root/empty", size=0, sha256=EMPTY_TREE)
    assert _fingerprint(Storage(), f"file://{tmp_path}/root", ref) == "empty"
    assert _fingerprint(Storage(), f"file://{tmp_path}/root", {**ref, "size": 5}) is None


def test_a_directory_of_too_many_entries_is_refused_not_listed_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(fingerprints, "MAX_FILES", 5)
    tree = tmp_path / "root" / "tree"
    tree.mkdir(parents=True)
    for index in range(10):
        (tree / f"f{index}").write_text("x")
    with pytest.raises(ValueError, match="more than 5"):
        _fingerprint(Storage(), f"file://{tmp_path}/root", _ref(f"file://{tree}"))
