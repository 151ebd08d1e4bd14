"""Reading an artifact: its bytes or its files, checked against the digest its writer recorded.

A local artifact (a ``file://`` root, or object storage the service mounts) is checked where it
is. A remote one goes through a ``DiskCache`` (``cache.py``): a copy already there is used after
the same check (a value's bytes are hashed as they are read, so that check costs no extra read),
else it is downloaded into a scratch directory of its entry, checked there, and only then renamed
into place, so nothing unverified is ever found under an artifact's name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from airflow_stepop.runtime.cache import DiskCache, Entry
from airflow_stepop.runtime.digest import EMPTY_TREE, LEGACY_KIND, digest_of, require_kind
from airflow_stepop.runtime.storage import Storage, read_hashed, unsafe_key

HEX_DIGEST = re.compile(r"[0-9a-f]{64}")


class ArtifactMissingError(FileNotFoundError):
    """An artifact that a reference points to is gone."""


class ArtifactIntegrityError(ValueError):
    """An artifact whose bytes no longer match the digest recorded when it was written."""


def digest_kind(ref: dict[str, Any]) -> str:
    """How the reference's digest was taken (a known kind, else a clear error)."""
    return require_kind(ref.get("digest_kind", LEGACY_KIND))


def check_ref(ref: dict[str, Any]) -> str:
    """The name the artifact's file or tree has in a cache; a reference whose digest, size or
    name could not have been written by airflow-stepop is refused before it names any path."""
    sha256, size, uri = ref.get("sha256"), ref.get("size"), ref.get("uri")
    if not isinstance(sha256, str) or not HEX_DIGEST.fullmatch(sha256):
        raise ArtifactIntegrityError(
            f"Artifact reference field sha256={sha256!r} is not a digest (64 lowercase hex "
            "digits): the reference was not written by airflow-stepop, or was changed. Re-run "
            "the task that produced it."
        )
    if type(size) is not int or size < 0:
        raise ArtifactIntegrityError(
            f"Artifact reference field size={size!r} is not a byte count (a whole number >= 0): "
            "the reference was not written by airflow-stepop. Re-run the task that produced it."
        )
    name = uri.rstrip("/").rsplit("/", 1)[-1] if isinstance(uri, str) else ""
    if unsafe_key(name):
        raise ArtifactIntegrityError(
            f"Artifact reference field uri={uri!r} does not end in a file or directory name "
            "(it ends in an empty, '.', '..' or backslash segment). Re-run the task that "
            "produced it."
        )
    return name


def as_cache(cache: DiskCache | Path) -> DiskCache:
    return cache if isinstance(cache, DiskCache) else DiskCache(cache)


def _check(ref: dict[str, Any], found: str) -> None:
    if found != ref["sha256"]:
        raise ArtifactIntegrityError(
            f"Artifact {ref['uri']} does not match the digest recorded when it was written "
            f"({digest_kind(ref)}: expected {ref['sha256']}, found {found}): it was modified or "
            "replaced after the step wrote it. Refusing to deserialize it; re-run the task "
            "that produced it."
        )


def _missing(uri: str) -> str:
    return (
        f"Artifact {uri} does not exist (deleted, expired by a lifecycle rule, or written to "
        "another artifact_root). Re-run the task that produced it."
    )


def _empty_tree(ref: dict[str, Any]) -> bool:
    """A returned directory with no file in it: an object store kept nothing of it."""
    return (
        ref.get("materializer") == "path" and ref.get("size") == 0 and ref["sha256"] == EMPTY_TREE
    )


def _read_file(ref: dict[str, Any], path: Path, kind: str) -> tuple[memoryview, str]:
    """The file's first ``size`` bytes and what they hash to (a longer or shorter file: says so)."""
    with open(path, "rb", buffering=0) as file:
        try:
            data, found = read_hashed(file, ref["size"], kind)
            if file.read(1):
                found = "a longer file"
        except EOFError:
            data, found = memoryview(b""), "a shorter file"
    return data, found


def _download(ref: dict[str, Any], storage: Storage, entry: Entry, name: str) -> Path:
    """Download the artifact into a new scratch directory of ``entry``: the copy's path."""
    scratch = entry.scratch()
    try:
        if storage.local_path(ref["uri"]) is not None:  # an empty tree no store kept
            raise FileNotFoundError(ref["uri"])
        storage.download(ref["uri"], scratch / name)
    except FileNotFoundError as exc:
        entry.discard(scratch)
        if _empty_tree(ref):  # nothing to fetch: the reference says what it was
            scratch = entry.scratch()
            (scratch / name).mkdir()
            return scratch / name
        raise ArtifactMissingError(_missing(ref["uri"])) from exc
    except BaseException:
        entry.discard(scratch)
        raise
    return scratch / name


def verified_bytes(ref: dict[str, Any], storage: Storage, cache: DiskCache | Path) -> memoryview:
    """The artifact's bytes, read once and checked against its recorded digest and size."""
    kind, name = digest_kind(ref), check_ref(ref)
    local = storage.local_path(ref["uri"])
    if local is not None:
        try:
            data, found = _read_file(ref, local, kind)
        except FileNotFoundError as exc:
            raise ArtifactMissingError(_missing(ref["uri"])) from exc
        _check(ref, found)
        return data
    cache = as_cache(cache)
    with cache.entry(ref["sha256"]) as entry:
        data = _cached_bytes(ref, entry, name, kind)
        if data is None:
            with entry.fetching():
                data = _cached_bytes(ref, entry, name, kind)  # fetched while we waited?
                if data is None:
                    copy = _download(ref, storage, entry, name)
                    try:
                        data, found = _read_file(ref, copy, kind)
                        _check(ref, found)
                        entry.publish(copy, name)
                    finally:
                        entry.discard(copy.parent)
    cache.evict()
    return data


def _cached_bytes(ref: dict[str, Any], entry: Entry, name: str, kind: str) -> memoryview | None:
    """The cached copy's bytes if there is one and it checks out; a copy that does not is set
    aside (a damaged or half-written copy of an earlier release), never an error."""
    try:
        data, found = _read_file(ref, entry.path / name, kind)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    if found == ref["sha256"]:
        return data
    entry.set_aside(name)
    return None


def verified_path(ref: dict[str, Any], storage: Storage, cache: DiskCache | Path) -> Path:
    """A local path with the artifact's file or tree, checked against its recorded digest. A
    cached copy stays in the cache for as long as this process runs."""
    kind, name = digest_kind(ref), check_ref(ref)
    local = storage.local_path(ref["uri"])
    if local is not None and (local.exists() or not _empty_tree(ref)):
        if not local.exists():
            raise ArtifactMissingError(_missing(ref["uri"]))
        _check(ref, digest_of(local, kind)[0])
        return local
    cache = as_cache(cache)
    entry = cache.entry(ref["sha256"]).open()
    try:
        found = _cached_path(ref, entry, name, kind)
        if found is None:
            with entry.fetching():
                found = _cached_path(ref, entry, name, kind)
                if found is None:
                    copy = _download(ref, storage, entry, name)
                    try:
                        _check(ref, digest_of(copy, kind)[0])
                        found = entry.publish(copy, name)
                    finally:
                        entry.discard(copy.parent)
        entry.keep()
    finally:
        entry.close()
    cache.evict()
    return found


def _cached_path(ref: dict[str, Any], entry: Entry, name: str, kind: str) -> Path | None:
    path = entry.path / name
    if not path.exists():
        return None
    if digest_of(path, kind)[0] == ref["sha256"]:
        return path
    entry.set_aside(name)
    return None
