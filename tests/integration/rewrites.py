"""Files rewritten in the artifact root after a step was staged or submitted, on every backend.

Whoever may write the artifact root (a job's execution role may write all of it) must not be
able to change what a job runs or what a worker unpickles (issue 39, point 2; DESIGN.md 8). The
tests stage a step, submit it, and rewrite in the bucket, before the job starts, one of:

* the code bundle ``<root>/code/<sha256>.zip``: with the same files, each module first writing a
  marker file when it is imported (``rewritten_bundle``);
* ``spec.json``: another callable of the same module, with arguments that write the marker
  (``rewritten_spec``);
* the entry script a service's job runs (``stepop_entry.py``, ``stepop_vertex_entry.py``): a
  script that writes the marker (``rewritten_entry``);
* the launch document (``stepop_launch.json``): the same document plus an environment that puts
  a ``sitecustomize`` writing the marker in front of the step runtime's ``PYTHONPATH``
  (``rewritten_launch``).

The job must then fail before any of it runs: no marker, no ``result.json``, and a failure that
says the file is not the one submitted. The emulated jobs run as local processes here (the local
backend's, and each fake's in process mode), so a marker under the test's ``tmp_path`` is a
place every rewritten file could write to.

A cloud job is held before it starts with the fakes' ``provisioning_delay`` rule: no fake has a
control that holds a job until released, so the delay is the hold. A job reads nothing of the
run directory before its delay ends, and the delay starts after the create call: :class:`Held`
checks that each rewrite ended within the delay of the submit's start, so a test never passes on
a rewrite that came too late to matter. A local job starts at submit: see its test file.
"""

from __future__ import annotations

import ast
import asyncio
import io
import json
import os
import pickle
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# What the bootstrap (backends/bootstrap.py) and the runtime (runtime/main.py) say when a file
# is not the one the job was submitted with.
REPLACED_FILE = "is not the file this job was submitted with (sha256 differs); nothing ran"
REWRITTEN_SPEC = "the spec was rewritten in the artifact root after the step was submitted"

STEPS_SOURCE = """
    from pathlib import Path


    def record(path, text):
        Path(path).write_text(text)
        return text


    def plant(path):
        Path(path).write_text("the rewritten spec's callable ran")
        return "planted"


    class Model:
        def __init__(self, weights):
            self.weights = weights


    def train(weights):
        return Model(weights)
"""


def marker_line(marker: Path, what: str) -> str:
    return f"__import__('pathlib').Path({str(marker)!r}).write_text({what!r})\n"


def _with_marker(source: bytes, line: str) -> bytes:
    """``source`` with ``line`` as its first statement after the docstring and the
    ``from __future__`` imports (which must come first)."""
    tree = ast.parse(source)
    after = 0
    for index, node in enumerate(tree.body):
        docstring = (
            index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        )
        future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        if not (docstring or future):
            break
        after = node.end_lineno or 0
    lines = source.decode().splitlines(keepends=True)
    return "".join([*lines[:after], line, *lines[after:]]).encode()


def rewritten_bundle(original: bytes, marker: Path) -> bytes:
    """The bundle's files, each of its modules (the step runtime's and the step's own) writing
    ``marker`` when it is imported."""
    out = io.BytesIO()
    line = marker_line(marker, "a module of the rewritten bundle was imported")
    with zipfile.ZipFile(io.BytesIO(original)) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith(".py"):
                data = _with_marker(data, line)
            target.writestr(info, data)
    return out.getvalue()


def rewritten_spec(original: bytes, marker: Path) -> bytes:
    """The same step's spec, calling ``plant(marker)`` instead."""
    spec = json.loads(original)
    spec["callable"] = {**spec["callable"], "qualname": "plant"}
    spec["args"] = [{"inline": str(marker)}]
    spec["kwargs"] = {}
    return json.dumps(spec).encode()


def rewritten_entry(marker: Path) -> bytes:
    return (
        f"import sys\n{marker_line(marker, 'the rewritten entry script ran')}sys.exit(0)\n".encode()
    )


def rewritten_launch(original: bytes, marker: Path, hook_dir: Path) -> bytes:
    """The launch document with ``PYTHONPATH`` set to ``hook_dir``, where a ``sitecustomize``
    writes ``marker``: the entry script gives the runtime the document's environment, and
    Python imports sitecustomize at start from the first directory of its path that has one."""
    hook_dir.mkdir(parents=True, exist_ok=True)
    (hook_dir / "sitecustomize.py").write_text(
        marker_line(marker, "the rewritten launch document's environment was used")
    )
    # the hook does what it says: any Python started with that environment runs it
    probe = {**os.environ, "PYTHONPATH": str(hook_dir)}
    subprocess.run([sys.executable, "-c", "pass"], env=probe, check=True, timeout=60)
    assert marker.exists()
    marker.unlink()
    launch = json.loads(original)
    launch["environment"] = {**launch.get("environment", {}), "PYTHONPATH": str(hook_dir)}
    return json.dumps(launch).encode()


def rewrite_staged(
    kind: str,
    request: Any,
    storage: Any,
    marker: Path,
    *,
    entry_file: str = "",
    launch_file: str = "",
) -> tuple[str, ...]:
    """Rewrite the staged file ``kind`` names ("bundle", "spec", "entry", "launch") of the job
    of ``request`` in the bucket; the words the task's error must then say."""
    from airflow_stepop.runtime.storage import join

    if kind == "bundle":
        rewrite(storage, request.code_uri, lambda data: rewritten_bundle(data, marker))
        return REPLACED_FILE, request.code_uri.rsplit("/", 1)[1]
    if kind == "spec":
        rewrite(storage, request.spec_uri, lambda data: rewritten_spec(data, marker))
        return REWRITTEN_SPEC, "SpecTamperedError"
    if kind == "entry":
        rewrite(storage, join(request.run_uri, entry_file), lambda _: rewritten_entry(marker))
        return REPLACED_FILE, entry_file
    if kind == "launch":
        hooks = marker.parent / f"{marker.name}-hooks"
        uri = join(request.run_uri, launch_file)
        rewrite(storage, uri, lambda data: rewritten_launch(data, marker, hooks))
        return REPLACED_FILE, launch_file
    raise ValueError(kind)


def staged_request(
    function: Callable[..., Any],
    args: list[Any],
    *,
    root: str,
    storage: Any,
    dag_id: str,
    task_id: str,
    **request: Any,
) -> Any:
    """Stage ``function(*args)`` as try 1 of a task in a new run, as an operator's ``execute()``
    does: the request to submit, with the digests the job checks and a try id of its own."""
    from airflow_stepop.backends.base import JobRequest
    from airflow_stepop.backends.naming import job_name, task_key
    from airflow_stepop.packaging.staging import StepIdentity, stage_step

    run_id = f"run-{uuid.uuid4().hex[:6]}"
    key = task_key(dag_id, run_id, task_id, -1)
    step = StepIdentity(dag_id, run_id, task_id, -1, 1)
    staged = stage_step(function, list(args), {}, root=root, step=step, storage=storage)
    return JobRequest(
        job_name=job_name(key, 1),
        task_key=key,
        spec_uri=staged.spec_uri,
        run_uri=staged.run_uri,
        code_uri=staged.code_uri,
        spec_sha256=staged.spec_sha256,
        code_sha256=staged.code_sha256,
        try_id=str(uuid.uuid4()),
        labels={"dag_id": dag_id, "task_id": task_id, "run_id": run_id, "map_index": "-1"},
        **request,
    )


def rewrite(storage: Any, uri: str, change: Callable[[bytes], bytes]) -> None:
    """Replace the object at ``uri`` with ``change`` of its bytes (different bytes)."""
    before = storage.read_bytes(uri)
    after = change(before)
    assert after != before
    storage.write_bytes(uri, after)
    assert storage.read_bytes(uri) == after


class RunsCode:
    """What a rewritten pickle holds: unpickling it runs ``source``."""

    def __init__(self, source: str) -> None:
        self.source = source

    def __reduce__(self) -> tuple[Any, ...]:
        return (exec, (self.source,))


def pickled(source: str) -> bytes:
    return pickle.dumps(RunsCode(source))


def object_array(source: str) -> bytes:
    """A .npy file of an object array: numpy pickles its items after the header."""
    import numpy

    stream = io.BytesIO()
    numpy.save(stream, numpy.array([RunsCode(source), 1], dtype=object), allow_pickle=True)
    return stream.getvalue()


def rewrite_result(
    storage: Any,
    handle: dict[str, Any],
    marker: Path,
    payload: Callable[[str], bytes],
    materializer: str = "cloudpickle",
) -> dict[str, Any]:
    """After a step returned one pickled value: its artifact rewritten with ``payload`` bytes that
    write ``marker`` when unpickled, and result.json with their digest, ``materializer`` and a
    connection id of the writer's. The rewritten record."""
    from airflow_stepop.backends.outcome import output_uri
    from airflow_stepop.runtime.digest import new_digest
    from airflow_stepop.runtime.storage import join

    result_uri = join(output_uri(handle), "result.json")
    manifest = storage.read_json(result_uri)
    record = manifest["outputs"]["ref"]
    assert record["materializer"] == "cloudpickle", record  # the step's value travels pickled
    data = payload(f"open({str(marker)!r}, 'w').write('unpickled')")
    with new_digest(record["digest_kind"]) as digest:
        digest.update(data)
        sha256 = digest.hexdigest()
    record.update(sha256=sha256, size=len(data), materializer=materializer, conn_id="attacker")
    storage.write_bytes(record["uri"], data)
    storage.write_json(result_uri, manifest)
    return record


@dataclass
class TryOf:
    """What ``execute()`` and ``execute_complete()`` read of Airflow's task instance, without a
    DAG run: its identity, and the XComs they push (links, billing) kept here."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1
    try_number: int = 1
    pushed: dict[str, Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def assert_never_unpickled(
    operator: Any,
    ti: Any,
    event: dict[str, Any],
    storage: Any,
    marker: Path,
    payload: Callable[[str], bytes],
    materializer: str = "cloudpickle",
) -> None:
    """Rewrite the result of ``event``'s succeeded job (``rewrite_result``), then finish the
    task as Airflow does (``execute_complete``) and load its result as a plain task downstream
    does: the reference is read with the operator's connection, never the manifest's, and
    nothing unpickles the rewritten bytes unless the user says so explicitly."""
    from airflow.sdk.serde import deserialize, serialize

    from airflow_stepop import ArtifactRef
    from airflow_stepop.artifacts.ref import UnpicklingRefusedError

    record = rewrite_result(storage, event["handle"], marker, payload, materializer)
    ref = operator.execute_complete({"ti": ti}, event)
    assert isinstance(ref, ArtifactRef)
    assert ref.sha256 == record["sha256"]  # the rewritten digest: the worker cannot vouch for it
    assert ref.conn_id == operator.storage_conn_id  # never the manifest's
    restored = deserialize(json.loads(json.dumps(serialize(ref))))  # XCom, to a plain task
    assert restored.conn_id == operator.storage_conn_id
    for loaded in (ref, restored):
        with pytest.raises((UnpicklingRefusedError, ValueError)) as refused:
            loaded.load()
        assert not marker.exists()
    if materializer == "cloudpickle":
        assert "allow_pickle=True" in str(refused.value)
        assert "worker_unpickle" in str(refused.value)
        # the choice the error names is what it takes: these bytes run code when unpickled
        ref.load(allow_pickle=True)
        assert marker.read_text() == "unpickled"
    else:
        assert "allow_pickle=False" in str(refused.value)  # numpy's own refusal


@dataclass
class Held:
    """A cloud job submitted while the fake holds new jobs ``seconds`` before they start."""

    seconds: float
    started: float = field(default_factory=time.monotonic)

    def check(self) -> None:
        """The rewrites so far came before the job could read anything of them."""
        took = time.monotonic() - self.started
        assert took < self.seconds, (
            f"the rewrite ended {took:.1f} s after the submit began, past the {self.seconds} s "
            "the fake held the job: it may have read the files first, so this run proves "
            "nothing (a loaded machine): run it again"
        )


def first_event(trigger: Any, timeout: float = 240) -> dict[str, Any]:
    """The trigger's event, run as a triggerer runs it."""

    async def first() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(asyncio.wait_for(first(), timeout))


def assert_refused(event: dict[str, Any], storage: Any, marker: Path, *said: str) -> str:
    """The job failed before anything rewritten ran: the task's error (what the operator
    raises) says why, no marker, no result. Returns the task's error."""
    from airflow_stepop.backends.outcome import output_uri, step_failure
    from airflow_stepop.runtime.storage import join

    assert event["status"] == "failed", event
    error = str(step_failure(event, storage))
    for words in said:
        assert words in error, error
    assert not marker.exists(), marker.read_text()
    handle = event["handle"]
    for directory in {output_uri(handle), handle["run_uri"]}:
        assert not storage.exists(join(directory, "result.json")), directory
    return error
