"""The cache a remote artifact is read through: many tasks on one worker share it, it holds only
verified copies, stays within its bound and never pulls a file from under a task using it; and
what a directory artifact's keys may name (issue 39, points 5 and 8)."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
from fsspec.implementations.local import LocalFileSystem

from airflow_stepop.runtime import values
from airflow_stepop.runtime.cache import DiskCache
from airflow_stepop.runtime.digest import SymlinkLoopError
from airflow_stepop.runtime.storage import Storage

SCHEME = "remote://"  # a store the runtime reads through fsspec, as s3:// or gs://


class CountingFileSystem(LocalFileSystem):
    """A local directory standing in for an object store; each download is logged to a file,
    so that downloads by several processes can be counted."""

    def __init__(self, log: pathlib.Path, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.log = log

    def get_file(self, rpath, lpath, **kwargs):
        with open(self.log, "a") as handle:
            handle.write(f"{rpath}\n")
        return super().get_file(rpath, lpath, **kwargs)


def remote_storage(store: pathlib.Path, log: pathlib.Path) -> Storage:
    fs = CountingFileSystem(log, skip_instance_cache=True)
    return Storage(resolver=lambda uri: (fs, f"{store}/{uri.removeprefix(SCHEME)}"))


@pytest.fixture
def store(tmp_path):
    (tmp_path / "store").mkdir()
    return tmp_path / "store"


def put(value, store: pathlib.Path, name: str) -> dict:
    """Write ``value`` as a step would, and return its reference as a remote one."""
    record = values.write_artifact(value, f"file://{store}/{name}", Storage())
    return {**record, "uri": SCHEME + record["uri"].removeprefix(f"file://{store}/")}


def downloads(log: pathlib.Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def stored_file(ref: dict, store: pathlib.Path) -> pathlib.Path:
    return store / ref["uri"].removeprefix(SCHEME)


def placed(cache: pathlib.Path, name: str) -> list[pathlib.Path]:
    """What the cache holds under an artifact's own name (not a scratch copy)."""
    return [p for p in cache.glob(f"*/{name}") if not p.parent.name.startswith(".")]


_LOADER = textwrap.dedent(
    """
    import hashlib, json, pathlib, sys
    sys.path.insert(0, sys.argv[1])
    from test_artifact_cache import remote_storage
    from airflow_stepop.runtime import values
    store, log, cache, ref = sys.argv[2:6]
    value = values.read_artifact(
        json.loads(ref), remote_storage(pathlib.Path(store), pathlib.Path(log)),
        pathlib.Path(cache),
    )
    print(hashlib.sha256(value).hexdigest())
    """
)


def test_many_processes_loading_one_artifact_at_once_download_it_once(store, tmp_path):
    """Mapped tasks on one worker loading one model: no false "modified or replaced" error,
    one download, and every load checked."""
    blob = os.urandom(24 * 1024 * 1024)
    ref = put(blob, store, "model")
    log, cache = tmp_path / "downloads.log", tmp_path / "cache"
    here = str(pathlib.Path(__file__).parent)
    command = [sys.executable, "-c", _LOADER, here, str(store), str(log), str(cache)]
    loaders = [
        subprocess.Popen(
            [*command, json.dumps(ref)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    outputs = [loader.communicate(timeout=120) for loader in loaders]

    for loader, (out, err) in zip(loaders, outputs, strict=True):
        assert loader.returncode == 0, err
        assert out.strip() == hashlib.sha256(blob).hexdigest()
    assert len(downloads(log)) == 1


def test_a_second_load_reuses_the_verified_copy(store, tmp_path):
    ref = put({"weights": list(range(1000))}, store, "weights")
    log = tmp_path / "downloads.log"
    storage = remote_storage(store, log)

    first = values.read_artifact(ref, storage, tmp_path / "cache")
    second = values.read_artifact(ref, storage, tmp_path / "cache")

    assert first == second == {"weights": list(range(1000))}
    assert len(downloads(log)) == 1


def test_a_damaged_cached_copy_is_downloaded_again_not_an_error(store, tmp_path):
    ref = put(b"model bytes" * 1000, store, "blob")
    log, cache = tmp_path / "downloads.log", tmp_path / "cache"
    storage = remote_storage(store, log)
    values.read_artifact(ref, storage, cache)
    [copy] = placed(cache, "blob.bin")
    copy.write_bytes(b"half a model")  # a crash, a disk error, an earlier release's race

    assert values.read_artifact(ref, storage, cache) == b"model bytes" * 1000
    assert len(downloads(log)) == 2


def test_a_changed_artifact_in_the_store_never_takes_its_place_in_the_cache(store, tmp_path):
    ref = put(b"trusted", store, "blob")
    stored_file(ref, store).write_bytes(b"changed")
    cache = tmp_path / "cache"

    with pytest.raises(values.ArtifactIntegrityError, match="does not match the digest"):
        values.read_artifact(ref, remote_storage(store, tmp_path / "log"), cache)
    assert placed(cache, "blob.bin") == []


def test_a_directory_artifact_is_verified_before_it_is_placed(store, tmp_path):
    model = tmp_path / "model"
    (model / "layers").mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "layers" / "0.bin").write_bytes(b"w" * 100)
    ref = put(model, store, "trained")
    (stored_file(ref, store) / "layers" / "0.bin").write_bytes(b"x" * 100)
    cache = tmp_path / "cache"

    with pytest.raises(values.ArtifactIntegrityError, match="does not match the digest"):
        values.read_artifact(ref, remote_storage(store, tmp_path / "log"), cache)
    assert placed(cache, "trained") == []


def test_a_directory_artifact_comes_back_whole_and_is_reused(store, tmp_path):
    model = tmp_path / "model"
    (model / "layers").mkdir(parents=True)
    (model / "layers" / "0.bin").write_bytes(b"w" * 100)
    ref = put(model, store, "trained")
    log = tmp_path / "log"
    storage = remote_storage(store, log)

    first = values.read_artifact(ref, storage, tmp_path / "cache")
    second = values.read_artifact(ref, storage, tmp_path / "cache")

    assert first == second and first.name == "trained"
    assert (first / "layers" / "0.bin").read_bytes() == b"w" * 100
    assert len(downloads(log)) == 1  # one file, downloaded once


class KeysStore:
    """An object store that lists the keys it is given (what a writer of the root could
    create), and writes whatever it is asked to download."""

    def __init__(self, keys):
        self.keys = keys
        self.written = []

    def isdir(self, path):
        return True

    def find(self, path):
        return self.keys

    def get_file(self, rpath, lpath, **kwargs):
        self.written.append(lpath)
        pathlib.Path(lpath).write_bytes(b"x")


@pytest.mark.parametrize(
    "key",
    [
        "bucket/run/model/../../escape.txt",
        "bucket/run/model//etc/cron.d/job",
        "bucket/run/model/..\\..\\escape.txt",
        "bucket/other/file.txt",
    ],
)
def test_keys_a_directory_artifact_may_not_hold_are_refused_before_any_download(key, tmp_path):
    remote = KeysStore(["bucket/run/model/ok.bin", key])
    storage = Storage(resolver=lambda uri: (remote, "bucket/run/model"))
    ref = {
        "uri": "remote://bucket/run/model",
        "sha256": "0" * 64,
        "size": 2,
        "materializer": "path",
        "type_name": "pathlib.PosixPath",
        "digest_kind": "sha256-chunked-8MiB",
    }

    with pytest.raises(ValueError, match="holds the key") as raised:
        values.read_artifact(ref, storage, tmp_path / "cache")

    assert repr(key) in str(raised.value)
    assert remote.written == []  # nothing, not even the good key, was written


@pytest.mark.parametrize("sha256", ["../planted", "A" * 64, "0" * 63, None])
def test_a_reference_whose_digest_is_no_sha256_is_refused(sha256, store, tmp_path):
    ref = {**put(b"data", store, "blob"), "sha256": sha256}

    with pytest.raises(values.ArtifactIntegrityError, match=r"sha256=.*64 lowercase hex"):
        values.read_artifact(ref, remote_storage(store, tmp_path / "log"), tmp_path / "cache")
    assert not (tmp_path / "planted").exists()  # no path was made of it


def _load(ref, store, log, cache):
    return values.read_artifact(ref, remote_storage(store, log), cache)


def test_the_cache_stays_within_its_bound_least_recently_used_first(store, tmp_path):
    one_mib = 1024 * 1024
    refs = {name: put(os.urandom(one_mib), store, name) for name in ("a", "b", "c")}
    cache, log = DiskCache(tmp_path / "cache", max_bytes=int(2.5 * one_mib)), tmp_path / "log"

    _load(refs["a"], store, log, cache)
    _load(refs["b"], store, log, cache)
    _load(refs["a"], store, log, cache)  # a is used again: b is now the least recent
    _load(refs["c"], store, log, cache)

    kept = {p.name for p in (tmp_path / "cache").glob("*/*.bin")}
    assert kept == {"a.bin", "c.bin"}
    _load(refs["a"], store, log, cache)
    assert len(downloads(log)) == 3  # a, b, c once each: a was never evicted


_HOLDER = textwrap.dedent(
    """
    import json, pathlib, sys
    sys.path.insert(0, sys.argv[1])
    from test_artifact_cache import remote_storage
    from airflow_stepop.runtime import values
    store, log, cache, ref = sys.argv[2:6]
    path = values.read_artifact(
        json.loads(ref), remote_storage(pathlib.Path(store), pathlib.Path(log)),
        pathlib.Path(cache),
    )
    print(path, flush=True)
    sys.stdin.readline()  # the test evicts meanwhile
    print((path / "weights.bin").read_bytes().decode(), flush=True)
    """
)


def test_an_artifact_another_task_is_using_is_never_evicted(store, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_text("still here")
    held_ref = put(model, store, "held")
    other = put(os.urandom(1024), store, "other")
    log, cache_dir = tmp_path / "log", tmp_path / "cache"
    here = str(pathlib.Path(__file__).parent)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, here, str(store), str(log), str(cache_dir),
         json.dumps(held_ref)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    held_path = pathlib.Path(holder.stdout.readline().strip())

    _load(other, store, log, DiskCache(cache_dir, max_bytes=0))  # evicts all it may

    assert (held_path / "weights.bin").exists()
    out, _ = holder.communicate("go\n", timeout=60)
    assert out.strip() == "still here" and holder.returncode == 0
    _load(other, store, log, DiskCache(cache_dir, max_bytes=0))  # the holder has exited
    assert not held_path.exists()


def test_a_returned_directory_keeps_its_symlinked_subdirectories(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "step-100").mkdir(parents=True)
    (checkpoint / "step-100" / "weights.bin").write_bytes(b"w")
    (checkpoint / "latest").symlink_to("step-100")
    storage = Storage()

    ref = values.write_artifact(checkpoint, f"file://{tmp_path}/out/model", storage)
    back = values.read_artifact(ref, storage, tmp_path / "cache")

    assert (back / "latest" / "weights.bin").read_bytes() == b"w"
    assert (back / "step-100" / "weights.bin").read_bytes() == b"w"
    assert ref["size"] == 2


def test_a_symlink_loop_in_a_returned_directory_is_refused_naming_it(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "sub").mkdir(parents=True)
    (checkpoint / "sub" / "weights.bin").write_bytes(b"w")
    (checkpoint / "sub" / "again").symlink_to("..")

    with pytest.raises(SymlinkLoopError, match=r"sub/again is a symbolic link to .*checkpoint"):
        values.write_artifact(checkpoint, f"file://{tmp_path}/out/model", Storage())
