"""Stages one step in object storage: code bundle, inputs and the spec the job will read."""

from __future__ import annotations

import hashlib
import json
import string
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from airflow_stepop.artifacts.ref import as_record
from airflow_stepop.packaging.cache import BundleCache, CodeBundle
from airflow_stepop.runtime import spec as specs
from airflow_stepop.runtime import values
from airflow_stepop.runtime.materializers import NoMaterializerError
from airflow_stepop.runtime.storage import Storage, join


class StepIdentity(NamedTuple):  # named tuples: a dataclass costs each task ~1 ms to define
    """Which try of which task instance a step is (names its run directory)."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int
    # This task instance's existence in its DAG run (``operators.task_identity``): a run
    # deleted and triggered again with the same run_id stages into another directory.
    instance: str = ""


class StagedStep(NamedTuple):
    """Where the staged step's spec, run directory and code bundle are, and the digests the
    job checks them against before it runs anything of them (``backends.bootstrap``)."""

    spec_uri: str
    run_uri: str
    code_uri: str
    spec_sha256: str
    code_sha256: str


_SAFE = frozenset(string.ascii_letters + string.digits + "._=-")


def _segment(value: object) -> str:
    """A path segment that is safe on every object store: each run of other characters is one
    ``_`` (no regular expression: compiling one costs a task process about 0.4 ms)."""
    text = str(value)
    if not _SAFE.issuperset(text):
        kept = "".join(c if c in _SAFE else "\0" for c in text)
        text = "_".join(part for part in kept.split("\0") if part)
    text = text.strip("_") or "_"
    # "." and ".." name the directory itself and its parent on a file system and in fsspec's
    # paths: a run_id of ".." must not stage the step beside another run's files
    return "_" * len(text) if not text.strip(".") else text


def as_function(target: Callable[..., Any]) -> Callable[..., Any]:
    """A function the packaging can ship for any callable ``PythonOperator`` takes: a
    ``functools.partial`` or an instance with ``__call__`` becomes a function that calls it,
    named after where it comes from and pickled by value (with that module's code)."""
    import functools
    import types

    if isinstance(target, (types.FunctionType, types.MethodType, types.BuiltinFunctionType)):
        return target
    origin = target.func if isinstance(target, functools.partial) else type(target)

    def call(*args: Any, **kwargs: Any) -> Any:
        return target(*args, **kwargs)

    call.__module__ = origin.__module__
    call.__qualname__ = f"<{type(target).__name__}>.{origin.__qualname__}"  # '<': by value
    return call


def _argument_label(function: Callable[..., Any], name: str) -> str:
    """An input's artifact name as the user wrote the argument: ``arg1.0`` ->
    ``op_args[1][0] (parameter 'batch')``, ``kwarg-model`` -> ``op_kwargs['model']``."""
    head, *path = name.split(".")
    inner = "".join(f"[{p}]" if p.isdigit() else f"[{p!r}]" for p in path)
    if head.startswith("kwarg-"):
        return f"op_kwargs[{head[6:]!r}]{inner}"
    index = int(head[3:])
    try:
        import inspect

        parameter = list(inspect.signature(function).parameters)[index]
    except (TypeError, ValueError, IndexError):  # no signature, or *args
        return f"op_args[{index}]{inner}"
    return f"op_args[{index}]{inner} (parameter {parameter!r})"


def run_uri_for(root: str, step: StepIdentity) -> str:
    """The run directory of one attempt:
    <root>/<dag>/<run>/<task>/<map_index>[/<instance>]/<try>."""
    parts = (step.dag_id, step.run_id, step.task_id, step.map_index, step.instance)
    return join(root, *(_segment(p) for p in parts if p != ""), _segment(step.try_number))


class EncodedStep:
    """A step made ready to stage, with nothing uploaded yet: its spec, the code bundle and
    its inputs written to a local scratch directory, their digests known. The step cache keys
    a step on this (``packaging.cache_key``); ``publish_step`` uploads it, ``discard`` drops it
    (a cache hit uploads nothing)."""

    def __init__(self, spec: dict[str, Any], run_uri: str, bundle: CodeBundle) -> None:
        import tempfile

        self.spec = spec
        self.run_uri = run_uri
        self.bundle = bundle
        self.code_uri: str = spec["code"]["uri"]
        self.pending: list[tuple[str, Any]] = []  # (uri, local path) to upload
        self.scratch = tempfile.TemporaryDirectory(prefix="stepop-stage-")

    def discard(self) -> None:
        self.scratch.cleanup()


def stage_step(
    function: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any], **options: Any
) -> StagedStep:
    """Upload the code bundle (once per content) and the inputs, then write the spec:
    ``encode_step`` (same ``options``) and ``publish_step`` in one call."""
    return publish_step(encode_step(function, args, kwargs, **options), options["storage"])


def encode_step(
    function: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    root: str,
    step: StepIdentity,
    storage: Storage,
    multiple_outputs: bool = False,
    inline_limit: int = 64 * 1024,
    mapped_downstream: bool = False,
) -> EncodedStep:
    """The step's spec, code bundle and inputs, written locally (``EncodedStep``)."""
    shipped = as_function(function)
    run_uri = run_uri_for(root, step)
    cache = BundleCache.default()
    bundle = cache.find(shipped, rebuild=lambda: _build_bundle(shipped).data)
    if bundle is None:
        bundle = _build_bundle(shipped, cache)
    code_uri = join(root, "code", f"{bundle.sha256}.zip")
    spec: dict[str, Any] = {
        "spec_version": specs.SPEC_VERSION,
        "python": specs.python_version(),
        "step": {
            "dag_id": step.dag_id,
            "run_id": step.run_id,
            "task_id": step.task_id,
            "map_index": step.map_index,
            "try_number": step.try_number,
            "instance": step.instance,
        },
        "code": {"uri": code_uri, "sha256": bundle.sha256},
        "callable": bundle.callable_entry,
    }
    encoded = EncodedStep(spec, run_uri, bundle)
    scratch = Path(encoded.scratch.name)
    inputs_uri = join(run_uri, specs.INPUTS_DIR)

    def write_input(value: Any, name: str) -> dict[str, Any]:
        try:
            record, path = values.materialize_artifact(value, join(inputs_uri, name), scratch)
        except NoMaterializerError as exc:
            raise NoMaterializerError(
                f"The step's argument {_argument_label(function, name)} cannot be sent to its job: "
                f"{exc.reason}. Pass a value of one of those types instead; for a lock, a client "
                "or an open file, pass what the step needs to make its own (a path, a URL, "
                "settings).",
                exc.reason,
            ) from exc.__cause__
        encoded.pending.append((record["uri"], path))
        return record

    def as_ref(value: Any) -> dict[str, Any] | None:
        record = as_record(value)
        if record is None or same_store(record["uri"], run_uri):
            return record
        carried, path = carry_in(value, record, inputs_uri, scratch)
        encoded.pending.append((carried["uri"], path))
        return carried

    def encode(value: Any, name: str) -> dict[str, Any]:
        return values.encode(
            value, name=name, inline_limit=inline_limit, write=write_input, as_ref=as_ref
        )

    try:
        spec["args"] = [encode(v, f"arg{i}") for i, v in enumerate(args)]
        spec["kwargs"] = {k: encode(v, f"kwarg-{k}") for k, v in kwargs.items()}
    except BaseException:
        encoded.discard()
        raise
    spec["multiple_outputs"] = multiple_outputs
    spec["inline_limit_bytes"] = inline_limit
    spec["mapped_downstream"] = mapped_downstream
    return encoded


def publish_step(
    encoded: EncodedStep, storage: Storage, extra: Mapping[str, Any] | None = None
) -> StagedStep:
    """Upload what ``encode_step`` made (the code bundle once per content), then write the spec,
    with ``extra`` fields (the step cache's key): the job reads them as the worker wrote them."""
    try:
        if not storage.exists(encoded.code_uri):
            storage.write_bytes(encoded.code_uri, encoded.bundle.data)
        for uri, path in encoded.pending:
            local = storage.local_path(uri)
            if local is None:
                storage.put(path, uri)
            else:
                values.publish_local(path, local)
    finally:
        encoded.discard()
    spec = {**encoded.spec, **(extra or {})}
    spec_uri = join(encoded.run_uri, specs.SPEC_NAME)
    # On one line: json's C encoder writes it (indented, the pure-Python one: ~0.2 ms a step).
    # Keys keep their order: a dict argument reaches the step as a plain XCom gives it.
    spec_bytes = json.dumps(spec).encode()
    storage.write_bytes(spec_uri, spec_bytes)
    return StagedStep(
        spec_uri=spec_uri,
        run_uri=encoded.run_uri,
        code_uri=encoded.code_uri,
        spec_sha256=hashlib.sha256(spec_bytes).hexdigest(),
        code_sha256=encoded.bundle.sha256,
    )


def _scheme(uri: str) -> str:
    scheme, found, _ = uri.partition("://")
    return scheme.lower() if found else "file"


def same_store(uri: str, root: str) -> bool:
    """Whether ``uri`` lives in the same kind of store as ``root`` (fsspec's aliases, e.g.
    ``az://`` and ``abfs://``, are one store): a job reads its own store's artifacts."""
    ours, theirs = _scheme(root), _scheme(uri)
    if ours == theirs:
        return True
    from fsspec.registry import known_implementations

    def implementation(scheme: str) -> str:
        return known_implementations.get(scheme, {}).get("class", scheme)

    return implementation(ours) == implementation(theirs)


def carry_in(
    ref: Any, record: dict[str, Any], inputs_uri: str, scratch: Path
) -> tuple[dict[str, Any], Path]:
    """An artifact from another store (a local step's ``file://`` result given to a cloud step,
    or the reverse), to copy into this run: the job reads only its own store. It is read into
    ``scratch`` with the connection that wrote it and checked against its digest on the way;
    its record (for its place in this run) and that copy are returned."""
    import tempfile

    from airflow_stepop.artifacts.storage import worker_storage

    target = join(inputs_uri, record["sha256"][:16], record["uri"].rstrip("/").rsplit("/", 1)[-1])
    source = values.verified_path(
        record, worker_storage(ref.conn_id), Path(tempfile.mkdtemp(prefix="carry-", dir=scratch))
    )
    return {**record, "uri": target}, source


def _build_bundle(function: Callable[..., Any], cache: BundleCache | None = None) -> CodeBundle:
    """Build the callable's bundle: packaging's own machinery is imported only when a task
    must build (most find theirs in the cache)."""
    from airflow_stepop.packaging.bundle import build_bundle

    return build_bundle(function, cache)
