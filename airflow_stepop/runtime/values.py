"""Value nodes: how arguments and results travel in specs and manifests.

A node is one of::

    {"inline": <JSON value>}                  small, exactly JSON-representable values
    {"ref": {uri, sha256, size, materializer, type_name[, python]}}   an artifact
    {"list": [node, ...], "tuple": bool}      a list/tuple holding references
    {"dict": {key: node, ...}}                a str-keyed dict holding references

Every artifact read checks the sha256 recorded by the side that wrote it before any bytes are
deserialized.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_stepop.runtime import materializers
from airflow_stepop.runtime.spec import python_version
from airflow_stepop.runtime.storage import Storage, digest_of


class ArtifactMissingError(FileNotFoundError):
    """An artifact that a reference points to is gone."""


class ArtifactIntegrityError(ValueError):
    """An artifact whose bytes no longer match the sha256 recorded when it was written."""


class PythonVersionMismatchError(RuntimeError):
    """Pickled bytes written by one Python minor version and read by another."""


def _contains(value: Any, is_ref: Callable[[Any], bool]) -> bool:
    if is_ref(value):
        return True
    if isinstance(value, (list, tuple)):
        return any(_contains(v, is_ref) for v in value)
    if isinstance(value, dict):
        return any(_contains(v, is_ref) for v in value.values())
    return False


def encode(
    value: Any,
    *,
    name: str,
    inline_limit: int,
    write: Callable[[Any, str], dict[str, Any]],
    as_ref: Callable[[Any], dict[str, Any] | None] = lambda value: None,
) -> dict[str, Any]:
    """Turn a value into a node: a reference, inline JSON, or a newly written artifact."""
    ref = as_ref(value)
    if ref is not None:
        return {"ref": ref}

    def is_ref(item: Any) -> bool:
        return as_ref(item) is not None

    def part(item: Any, suffix: object) -> dict[str, Any]:
        return encode(
            item, name=f"{name}.{suffix}", inline_limit=inline_limit, write=write, as_ref=as_ref
        )

    if isinstance(value, (list, tuple)) and _contains(value, is_ref):
        items = [part(v, i) for i, v in enumerate(value)]
        return {"list": items, "tuple": isinstance(value, tuple)}
    if isinstance(value, dict) and all(type(k) is str for k in value) and _contains(value, is_ref):
        return {"dict": {k: part(v, k) for k, v in value.items()}}
    if materializers.is_strict_json(value) and len(json.dumps(value)) <= inline_limit:
        return {"inline": value}
    return {"ref": write(value, name)}


def decode(node: dict[str, Any], load_ref: Callable[[dict[str, Any]], Any]) -> Any:
    if "inline" in node:
        return node["inline"]
    if "ref" in node:
        return load_ref(node["ref"])
    if "list" in node:
        items = [decode(n, load_ref) for n in node["list"]]
        return tuple(items) if node.get("tuple") else items
    if "dict" in node:
        return {k: decode(n, load_ref) for k, n in node["dict"].items()}
    raise ValueError(f"Unknown value node {sorted(node)}")


def write_artifact(value: Any, uri: str, storage: Storage) -> dict[str, Any]:
    """Materialize a value at ``uri`` (suffix added) and return its reference record."""
    materializer = materializers.for_value(value)
    uri = uri + materializer.suffix
    local = storage.local_path(uri)
    if local is not None:  # write beside the target, then rename into place
        local.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".tmp-", dir=local.parent))
    else:
        scratch = Path(tempfile.mkdtemp(prefix="stepop-out-"))
    try:
        path = scratch / "artifact"
        materializer.write(value, path)
        sha256, size = digest_of(path)
        if local is not None:
            if local.is_dir():
                shutil.rmtree(local)
            os.replace(path, local)
        else:
            storage.put(path, uri)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    ref = {
        "uri": uri,
        "sha256": sha256,
        "size": size,
        "materializer": materializer.name,
        "type_name": materializers.type_name(value),
    }
    if materializer.name == "cloudpickle":
        ref["python"] = python_version()
    return ref


def verified_path(ref: dict[str, Any], storage: Storage, cache_dir: Path) -> Path:
    """A local path with the artifact's bytes, checked against its recorded sha256."""
    uri = ref["uri"]
    try:
        path = storage.fetch(uri, cache_dir / ref["sha256"])
    except FileNotFoundError as exc:
        raise ArtifactMissingError(_missing(uri)) from exc
    if not path.exists():
        raise ArtifactMissingError(_missing(uri))
    sha256, _ = digest_of(path)
    if sha256 != ref["sha256"]:
        raise ArtifactIntegrityError(
            f"Artifact {uri} does not match the sha256 recorded when it was written "
            f"(expected {ref['sha256']}, found {sha256}): it was modified or replaced after "
            "the step wrote it. Refusing to deserialize it; re-run the task that produced it."
        )
    return path


def read_artifact(ref: dict[str, Any], storage: Storage, cache_dir: Path) -> Any:
    path = verified_path(ref, storage, cache_dir)
    written_by = ref.get("python")
    if written_by and written_by != python_version():
        raise PythonVersionMismatchError(
            f"Artifact {ref['uri']} was pickled by Python {written_by} and this process runs "
            f"Python {python_version()}: pickles do not travel between minor versions. Use the "
            "same Python minor version on the worker and in the job image "
            "(DockerSettings.parent_image), or return a type with its own materializer."
        )
    return materializers.by_name(ref["materializer"]).read(path)


def _missing(uri: str) -> str:
    return (
        f"Artifact {uri} does not exist (deleted, expired by a lifecycle rule, or written to "
        "another artifact_root). Re-run the task that produced it."
    )
