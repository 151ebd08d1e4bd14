"""What an artifact in the store is now, by the store's own word, without reading its bytes.

The step cache notes each output's fingerprint when it keeps a result and compares it before it
hands that result out again: an object rewritten or deleted since (a lifecycle rule, a person, a
job) no longer matches, and the step runs again. The store gives the stamps: an object's ETag
(S3, Azure Blob) or generation (Cloud Storage), which change with every write, and its size; a
local file's size, modification time (ns) and inode. A directory artifact is every file under it
by its relative name. Reading a model's gigabytes back to hash them would cost a worker more
than the job it saves; the digests themselves were checked when the job wrote them.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from airflow_stepop.runtime.storage import Storage

# The fields of an fsspec ``info()`` that change when an object is written again.
_STAMPS = (
    "ETag", "etag", "VersionId", "version_id", "generation", "md5Hash", "crc32c",
    "LastModified", "last_modified", "updated", "mtime", "created",
)  # fmt: skip
MAX_FILES = 100_000  # in one directory artifact: more is no artifact of ours


def fingerprint(storage: Storage, uri: str) -> str | None:
    """The artifact's fingerprint (a sha256), or None when nothing is at ``uri``."""
    local = storage.local_path(uri)
    if local is not None:
        files = _local_files(local)
    else:
        fs, path = storage.resolver(uri)
        files = _remote_files(fs, path)
    if files is None:
        return None
    return hashlib.sha256(json.dumps(files, sort_keys=True, default=str).encode()).hexdigest()


def _local_files(path: Path) -> dict[str, Any] | None:
    try:
        found = path.lstat()
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(found.st_mode):  # a job may have put a link in the artifact's place
        raise ValueError(f"{path} is a symbolic link, not an artifact")
    if not stat.S_ISDIR(found.st_mode):
        return {"": [found.st_size, found.st_mtime_ns, found.st_ino]}
    files: dict[str, Any] = {}
    for folder, folders, names in os.walk(path):  # links are not followed
        for name in [*names, *folders]:
            entry = Path(folder, name)
            info = entry.lstat()
            files[entry.relative_to(path).as_posix()] = [
                stat.S_IFMT(info.st_mode),
                info.st_size,
                info.st_mtime_ns,
                info.st_ino,
            ]
            _bounded(files, path)
    return files


def _remote_files(fs: Any, path: str) -> dict[str, Any] | None:
    try:
        info = fs.info(path)
    except FileNotFoundError:
        return None
    if info.get("type") != "directory":
        return {"": _stamp(info)}
    prefix = path.rstrip("/") + "/"
    files: dict[str, Any] = {}
    for _, folders, names in fs.walk(path.rstrip("/"), detail=True):  # a listing at a time
        for detail in [*names.values(), *folders.values()]:
            files[detail["name"].removeprefix(prefix)] = _stamp(detail)
            _bounded(files, path)
    return files or None


def _bounded(files: dict[str, Any], path: Any) -> None:
    if len(files) > MAX_FILES:
        raise ValueError(f"{path} holds more than {MAX_FILES} files and folders")


def _stamp(info: dict[str, Any]) -> list[Any]:
    return [info.get("size"), *(info[name] for name in _STAMPS if info.get(name) is not None)]


def artifact_fingerprint(storage: Storage, root: str, ref: Any) -> str | None:
    """An artifact's fingerprint (``artifacts.fingerprint``), only under the artifact root: the
    job wrote its URI. A directory with no file in it has nothing in an object store: "empty"."""
    from airflow_stepop.runtime.storage import unsafe_key
    from airflow_stepop.runtime.verified import EMPTY_TREE

    uri = ref.get("uri") if isinstance(ref, dict) else None
    prefix = root.rstrip("/") + "/"
    if not isinstance(uri, str) or not uri.startswith(prefix) or unsafe_key(uri[len(prefix) :]):
        raise ValueError(f"{uri!r} is not under the artifact root {root}")
    found = fingerprint(storage, uri)
    if found is None and ref.get("size") == 0 and ref.get("sha256") == EMPTY_TREE:
        return "empty"
    return found
