"""The local backend runs only what the worker staged; a worker never unpickles a rewritten result.

A local job starts at submit (nothing holds it), and its submit reads nothing of the run
directory: the files are rewritten after staging and before the submit, which the job cannot
tell from a rewrite after the submit (it reads them when it starts). The process-mode tests then
run the rewritten files once more as another try whose digests match them, to show that they
would have written the marker. See tests/integration/rewrites.py.
"""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from airflow_stepop.backends.local.backend import LocalBackend
from airflow_stepop.runtime.storage import Storage
from tests.integration.faults import trigger_for
from tests.integration.rewrites import (
    REPLACED_FILE,
    REWRITTEN_SPEC,
    STEPS_SOURCE,
    TryOf,
    assert_never_unpickled,
    assert_refused,
    first_event,
    object_array,
    pickled,
    rewrite,
    rewritten_bundle,
    rewritten_spec,
    staged_request,
)
from tests.step_modules import step_module


@pytest.fixture
def steps(tmp_path, monkeypatch):
    yield from step_module(tmp_path, monkeypatch, "rewrite_steps", STEPS_SOURCE)


def _staged(tmp_path, function, args, task_id, **request):
    storage = Storage()
    staged = staged_request(
        function, args, root=f"file://{tmp_path}/root", storage=storage,
        dag_id="rewrites", task_id=task_id, **request,
    )  # fmt: skip
    return staged, storage


def _run(tmp_path, request):
    backend = LocalBackend(jobs_dir=str(tmp_path / "jobs"))
    handle = backend.submit(request)
    try:
        return first_event(trigger_for(backend, handle), 180)
    finally:
        backend.release(handle)


def _again(request, **changes):
    """The same staged files, submitted as another job (another try)."""
    from airflow_stepop.backends.naming import job_name

    return dataclasses.replace(request, job_name=job_name(request.task_key, 2), **changes)


def test_a_bundle_rewritten_after_staging_fails_the_process_job_before_any_of_it_runs(
    tmp_path, steps
):
    marker = tmp_path / "marker"
    request, storage = _staged(tmp_path, steps.record, [str(tmp_path / "out"), "x"], "bundle")
    rewrite(storage, request.code_uri, lambda data: rewritten_bundle(data, marker))

    event = _run(tmp_path, request)
    error = assert_refused(event, storage, marker, REPLACED_FILE)
    assert request.code_uri.rsplit("/", 1)[1] in error  # names the bundle
    assert not (tmp_path / "out").exists()

    # what the check kept from running: the same files with the rewritten bundle's digest
    evil = hashlib.sha256(storage.read_bytes(request.code_uri)).hexdigest()
    _run(tmp_path, _again(request, code_sha256=evil))
    assert marker.read_text() == "a module of the rewritten bundle was imported"


def test_a_spec_rewritten_after_staging_fails_the_process_job_before_it_is_read(tmp_path, steps):
    marker = tmp_path / "marker"
    request, storage = _staged(tmp_path, steps.record, [str(tmp_path / "out"), "x"], "spec")
    rewrite(storage, request.spec_uri, lambda data: rewritten_spec(data, marker))

    event = _run(tmp_path, request)
    error = assert_refused(event, storage, marker, REWRITTEN_SPEC, "SpecTamperedError")
    assert request.spec_uri in error
    assert not (tmp_path / "out").exists()

    evil = hashlib.sha256(storage.read_bytes(request.spec_uri)).hexdigest()
    _run(tmp_path, _again(request, spec_sha256=evil))
    assert marker.read_text() == "the rewritten spec's callable ran"


@pytest.mark.container
def test_a_bundle_rewritten_after_staging_fails_the_container_job_before_any_of_it_runs(
    tmp_path, steps, docker_client
):
    from airflow_stepop import DockerSettings
    from tests.integration.conftest import BASE_IMAGE

    marker = tmp_path / "root" / "marker"  # the artifact root is mounted in the container
    request, storage = _staged(
        tmp_path, steps.record, [str(tmp_path / "root" / "out"), "x"], "container",
        docker=DockerSettings(parent_image=BASE_IMAGE),
    )  # fmt: skip
    rewrite(storage, request.code_uri, lambda data: rewritten_bundle(data, marker))
    backend = LocalBackend(jobs_dir=str(tmp_path / "jobs"))
    handle = backend.submit(request)
    try:
        assert handle["mode"] == "container"
        event = first_event(trigger_for(backend, handle), 240)
    finally:
        backend.release(handle)
    error = assert_refused(event, storage, marker, REPLACED_FILE)
    assert request.code_uri.rsplit("/", 1)[1] in error
    assert not (tmp_path / "root" / "out").exists()


@pytest.mark.parametrize(
    ("materializer", "payload"),
    [("cloudpickle", pickled), ("numpy", object_array)],
    ids=["pickle", "numpy-object-array"],
)
def test_a_rewritten_result_and_pickle_are_never_unpickled_on_the_worker(
    tmp_path, steps, monkeypatch, materializer, payload
):
    """After the job succeeded, whoever may write the root rewrites its pickled result and
    result.json (a matching digest, a connection of theirs, and for the numpy case the name of
    a materializer the pickle refusal does not cover): the task's result is a reference read
    with the operator's connection, and loading it in a plain task never unpickles it."""
    from airflow.sdk.bases.operator import ExecutorSafeguard
    from airflow.sdk.exceptions import TaskDeferred

    from airflow_stepop import LocalStepOperator

    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", f"file://{tmp_path}/artifacts")
    monkeypatch.setenv("AIRFLOW__STEPOP__LOCAL_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("AIRFLOW__STEPOP__WORKER_UNPICKLE", raising=False)
    operator = LocalStepOperator(task_id="train", python_callable=steps.train, op_args=[[1, 2]])
    ti = TryOf("d", "r", "train")
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute({"ti": ti}, LocalStepOperator__sentinel=ExecutorSafeguard.sentinel_value)
    event = first_event(deferred.value.trigger, 180)
    assert event["status"] == "succeeded", event

    assert_never_unpickled(
        operator, ti, event, Storage(), tmp_path / "unpickled", payload, materializer
    )
