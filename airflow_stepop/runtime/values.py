"""Value nodes: how arguments and results travel in specs and manifests.

A node is one of::

    {"inline": <JSON value>}                  small, exactly JSON-representable values
    {"ref": {uri, sha256, size, materializer, type_name, digest_kind[, python]}}  an artifact
    {"list": [node, ...], "tuple": bool}      a list/tuple holding references
    {"dict": {key: node, ...}}                a str-keyed dict holding references

Every artifact read checks the digest recorded by the side that wrote it before any bytes are
deserialized: ``sha256`` holds it, ``digest_kind`` says how it was taken (``digest.py``; a
reference without one was written by an earlier release with a plain sha256).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from airflow_stepop.runtime import materializers
from airflow_stepop.runtime.cache import DiskCache
from airflow_stepop.runtime.digest import WRITTEN_KIND
from airflow_stepop.runtime.spec import python_version
from airflow_stepop.runtime.storage import HashingWriter, Storage, temporary_beside
from airflow_stepop.runtime.verified import (  # the errors are raised to callers of this module
    ArtifactIntegrityError,
    ArtifactMissingError,
    verified_bytes,
    verified_path,
)

__all__ = ["ArtifactIntegrityError", "ArtifactMissingError", "read_artifact", "verified_path"]


class PythonVersionMismatchError(RuntimeError):
    """Pickled bytes written by one Python minor version and read by another."""


def _contains(value: Any, stands_alone: Callable[[Any], bool]) -> bool:
    if stands_alone(value):
        return True
    if isinstance(value, (list, tuple)):
        return any(_contains(v, stands_alone) for v in value)
    if isinstance(value, dict):
        return any(_contains(v, stands_alone) for v in value.values())
    return False


def refuse_missing_paths(value: Any, where: str = "return_value") -> None:
    """A returned ``Path`` names files to keep; one that does not exist (a typo, a file saved
    under another name) would travel pickled, a name on a machine that is gone."""
    if isinstance(value, Path) and not value.exists():
        raise materializers.NoMaterializerError(
            f"The step returned {value!r} at {where}, which does not exist in the job (working "
            f"directory {os.getcwd()}): its files cannot be kept. Return the path of the file "
            "or directory the step wrote, or str(path) to return the name alone.",
            f"{value!r} does not exist",
        )
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            refuse_missing_paths(item, f"{where}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            refuse_missing_paths(item, f"{where}[{key!r}]")


def _small_json_with_tuples(value: Any, inline_limit: int) -> bool:
    """JSON but for tuples in it, and small: it travels inline, as nodes that keep the tuples
    (pickling it would hand the task an ArtifactRef in place of a pair of numbers)."""
    if not isinstance(value, (list, tuple, dict)) or not _fewer_items(value, inline_limit):
        return False  # each item is at least a byte of JSON: a long one is no small value
    if materializers.is_strict_json(value):
        return False
    as_lists = _tuples_as_lists(value)
    return materializers.is_strict_json(as_lists) and len(json.dumps(as_lists)) <= inline_limit


def pickled_json_note(value: Any, name: str, inline_limit: int) -> str | None:
    """Why a small result comes back as a pickled ``ArtifactRef`` when it would be inline JSON
    but for numpy scalars (sklearn's scores), NaN or infinity, datetimes, Decimals or keys that
    are not strings: the first of them, with the fix. None for anything else (a model or an
    array is pickled on purpose)."""
    if isinstance(value, (list, tuple, dict)) and not _fewer_items(value, inline_limit):
        return None
    misses: list[tuple[str, str]] = []
    as_json = _as_json(value, name, misses)
    if not misses or not materializers.is_strict_json(as_json):
        return None  # something else in it is no JSON either (NaN, a model, a set)
    if len(json.dumps(as_json)) > inline_limit:
        return None  # too big to be inline anyway
    reason, fix = misses[0]
    return (
        f"[stepop] {name} comes back as an ArtifactRef (pickled), not inline: {reason}, so a "
        f"plain task gets a reference to .load(). Return {fix} to keep the result inline."
    )


def _as_json(value: Any, where: str, misses: list[tuple[str, str]]) -> Any:
    """``value`` with numpy scalars, NaN and infinity, datetimes and Decimals as JSON and keys
    as strings, noting each of them with its fix."""

    def missed(fix: str) -> None:
        misses.append((f"{where} is a {materializers.type_name(value)}, which is not JSON", fix))

    if _is_numpy_scalar(value):
        missed("float(...) or int(...) of it")
        return value.item()
    if type(value) is float and not math.isfinite(value):  # a diverged loss, a best of inf
        misses.append((f"{where} is {value!r}, which JSON has no value for", "None in its place"))
        return None
    if (nearly := _nearly_json(value)) is not None:
        stand_in, fix = nearly
        missed(fix)
        return stand_in
    if type(value) in (list, tuple):
        return [_as_json(item, f"{where}[{i}]", misses) for i, item in enumerate(value)]
    if type(value) is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                misses.append(
                    (f"{where} has the key {key!r}, and JSON keys are strings", "str keys")
                )
            out[str(key)] = _as_json(item, f"{where}[{key!r}]", misses)
        return out
    return value


def _nearly_json(value: Any) -> tuple[Any, str] | None:
    """A value a plain task's XCom takes and JSON does not, as its JSON stand-in and the fix.
    Looked up in ``sys.modules``: a value of a module never imported cannot be here."""
    datetime, decimal = sys.modules.get("datetime"), sys.modules.get("decimal")
    if datetime is not None and isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat(), ".isoformat() of it"
    if decimal is not None and isinstance(value, decimal.Decimal):
        return float(value), "float(...) or str(...) of it"
    return None


def _is_numpy_scalar(value: Any) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.generic)


def _fewer_items(value: Any, limit: int) -> bool:
    """Whether ``value`` holds at most ``limit`` items, nested ones counted (stops early)."""
    pending, seen = [value], 0
    while pending:
        item = pending.pop()
        seen += 1
        if seen > limit:
            return False
        if type(item) in (list, tuple):
            pending.extend(item)
        elif type(item) is dict:
            pending.extend(item.values())
    return True


def _tuples_as_lists(value: Any) -> Any:
    if type(value) in (list, tuple):  # a named tuple is not JSON: it keeps its class, pickled
        return [_tuples_as_lists(v) for v in value]
    if type(value) is dict:
        return {k: _tuples_as_lists(v) for k, v in value.items()}
    return value


def _items(sequence: Sequence[Any]) -> list[Any]:
    """A sequence's items, by one slice where it takes slices: Airflow's lazy sequence of a
    mapped task's results fetches a slice in one call, while iterating it costs a call per item
    and one past the end, which Airflow logs at ERROR as "XCom not found"."""
    try:
        return list(sequence[:])
    except TypeError:  # a sequence that takes only integer indices
        return list(sequence)


def encode(
    value: Any,
    *,
    name: str,
    inline_limit: int,
    write: Callable[[Any, str], dict[str, Any]],
    as_ref: Callable[[Any], dict[str, Any] | None] = lambda value: None,
) -> dict[str, Any]:
    """Turn a value into a node: a reference, inline JSON, or a newly written artifact."""
    if not isinstance(value, (list, tuple, str, bytes, bytearray)) and isinstance(value, Sequence):
        value = _items(value)  # e.g. Airflow's lazy sequence of a mapped task's results
    ref = as_ref(value)
    if ref is not None:
        return {"ref": ref}

    def stands_alone(item: Any) -> bool:
        """A reference, or a Path whose files must be an artifact of their own."""
        return as_ref(item) is not None or materializers.names_files(item)

    def part(item: Any, suffix: object) -> dict[str, Any]:
        return encode(
            item, name=f"{name}.{suffix}", inline_limit=inline_limit, write=write, as_ref=as_ref
        )

    # a structure that holds references, or JSON but for tuples in it (kept tuples, inline)
    structure = isinstance(value, (list, tuple, dict)) and (
        _contains(value, stands_alone) or _small_json_with_tuples(value, inline_limit)
    )
    if structure and isinstance(value, (list, tuple)):
        items = [part(v, i) for i, v in enumerate(value)]
        return {"list": items, "tuple": isinstance(value, tuple)}
    if structure and isinstance(value, dict) and all(type(k) is str for k in value):
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


def references(node: Any) -> list[dict[str, Any]]:
    """The record of every artifact reference in a value node, depth first."""
    if isinstance(node, dict):
        if isinstance(node.get("ref"), dict):
            return [node["ref"]]
        children = [*node.get("list", []), *(node.get("dict") or {}).values()]
        return [record for child in children for record in references(child)]
    return []


def input_uris(spec: dict[str, Any]) -> list[str]:
    """The URIs of the artifacts a job spec's arguments reference: what the job will read."""
    arguments = {"list": spec.get("args", []), "dict": spec.get("kwargs", {})}
    return [record["uri"] for record in references(arguments)]


def write_artifact(value: Any, uri: str, storage: Storage) -> dict[str, Any]:
    """Materialize a value at ``uri`` (suffix added) and return its reference record.

    The digest is taken of exactly the bytes written, as they are written (no second read).
    A local target is written beside itself and renamed into place; a remote one is written to
    a local scratch directory first, then uploaded.
    """
    materializer = materializers.for_value(value)
    uri = uri + materializer.uri_suffix(value)
    local = storage.local_path(uri)
    if local is None:
        with tempfile.TemporaryDirectory(prefix="stepop-") as scratch:
            path = Path(scratch) / "artifact"
            hexdigest, size = _materialize(materializer, value, path)
            storage.put(path, uri)
    else:
        local.parent.mkdir(parents=True, exist_ok=True)
        temporary = temporary_beside(local)
        try:
            hexdigest, size = _materialize(materializer, value, temporary)
            publish_local(temporary, local)
        except BaseException:
            _remove(temporary)
            raise
    return _record(materializer, value, uri, hexdigest, size)


def materialize_artifact(value: Any, uri: str, scratch: Path) -> tuple[dict[str, Any], Path]:
    """Write a value into the ``scratch`` directory, not yet to ``uri``: its reference record
    (for ``uri``, suffix added) and the local file or tree to upload there. A worker stages a
    step's inputs this way so that it knows their digests before it uploads anything (a step
    whose result is cached uploads nothing)."""
    materializer = materializers.for_value(value)
    path = Path(tempfile.mkdtemp(prefix="input-", dir=scratch)) / "artifact"
    hexdigest, size = _materialize(materializer, value, path)
    return _record(materializer, value, uri + materializer.uri_suffix(value), hexdigest, size), path


def publish_local(source: Path, target: Path) -> None:
    """Move a written file or tree to ``target``, replacing what is there (a rename where both
    are on one file system)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_dir():
        shutil.rmtree(target)
    try:
        os.replace(source, target)
    except OSError:  # another file system: copy, then drop the source
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copyfile(source, target)
        _remove(source)


def _record(
    materializer: materializers.Materializer, value: Any, uri: str, hexdigest: str, size: int
) -> dict[str, Any]:
    ref = {
        "uri": uri,
        "sha256": hexdigest,
        "size": size,
        "materializer": materializer.name,
        "type_name": materializers.type_name(value),
        "digest_kind": WRITTEN_KIND,
    }
    if materializer.name == "cloudpickle":
        ref["python"] = python_version()
    return ref


def _materialize(
    materializer: materializers.Materializer, value: Any, path: Path
) -> tuple[str, int]:
    """Write the value at a new ``path``: its digest and size."""
    if materializer.on_disk:
        return materializer.copy(value, path)
    with open(path, "xb") as file, HashingWriter(file) as writer:
        materializer.dump(value, writer)
        return writer.hexdigest(), writer.size


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def read_artifact(ref: dict[str, Any], storage: Storage, cache: DiskCache | Path) -> Any:
    """The artifact's value; its bytes are verified before any of them is deserialized. A
    remote artifact is read through ``cache`` (a ``DiskCache``, or a directory for one)."""
    written_by = ref.get("python")
    if written_by and written_by != python_version():
        raise PythonVersionMismatchError(
            f"Artifact {ref['uri']} was pickled by Python {written_by} and this process runs "
            f"Python {python_version()}: pickles do not travel between minor versions. Use the "
            "same Python minor version on the worker and in the job image "
            "(DockerSettings.parent_image), or return a type with its own materializer."
        )
    materializer = materializers.by_name(ref["materializer"])
    if materializer.on_disk:
        return materializer.open(verified_path(ref, storage, cache))
    return materializer.load(verified_bytes(ref, storage, cache))
