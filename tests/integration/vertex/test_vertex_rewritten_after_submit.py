"""A Vertex AI CustomJob whose files were rewritten in GCS after its submit runs none of them.

The fake holds the job in JOB_STATE_PENDING, before it copies the buckets down to /gcs
(``provisioning_delay``); the test rewrites the code bundle, the spec or the entry script in the
bucket, and the job must fail before anything rewritten runs (a CustomJob has no launch
document: everything else travels in its command and environment). A result rewritten
after the job succeeded is never unpickled on the worker. See tests/integration/rewrites.py.
"""

from __future__ import annotations

import pytest

from tests.integration.faults import trigger_for
from tests.integration.rewrites import (
    STEPS_SOURCE,
    Held,
    TryOf,
    assert_never_unpickled,
    assert_refused,
    first_event,
    pickled,
    rewrite_staged,
    staged_request,
)
from tests.step_modules import step_module

BASE = "127.0.0.1:5000/stepop-base/python:3.11-bookworm"
HOLD_S = 8.0


@pytest.fixture
def steps(tmp_path, monkeypatch):
    yield from step_module(tmp_path, monkeypatch, "vx_rewrite_steps", STEPS_SOURCE)


@pytest.mark.parametrize("kind", ["bundle", "spec", "entry"])
def test_a_file_rewritten_in_gcs_after_submit_fails_the_job_before_any_of_it_runs(
    gcp, ctl, steps, tmp_path, kind
):
    from airflow_stepop.artifacts.storage import worker_storage
    from airflow_stepop.backends.vertex.backend import VertexBackend
    from airflow_stepop.backends.vertex.config import VertexJobConfig
    from airflow_stepop.backends.vertex.job import ENTRY_FILE

    backend = VertexBackend(job=VertexJobConfig(machine_type="n1-standard-4", image_uri=BASE))
    storage = worker_storage("google_cloud_default")
    out, marker = tmp_path / "out", tmp_path / "marker"
    request = staged_request(
        steps.record, [str(out), "ran"], root=gcp["root"], storage=storage,
        dag_id="vx_rewrites", task_id=kind,
    )  # fmt: skip
    ctl.add_faults({"kind": "provisioning_delay", "seconds": HOLD_S})
    held = Held(HOLD_S)
    handle = backend.submit(request)
    said = rewrite_staged(kind, request, storage, marker, entry_file=ENTRY_FILE)
    held.check()
    assert backend.status(handle).state == "pending"

    event = first_event(trigger_for(backend, handle, storage_conn_id="google_cloud_default"))
    assert_refused(event, storage, marker, *said)
    assert not out.exists()  # the step itself never ran either


def test_a_rewritten_result_and_pickle_are_never_unpickled_on_the_worker(
    gcp, ctl, steps, tmp_path, monkeypatch
):
    """The step writes its result into the run directory through the job's /gcs mount; whoever
    may write the root rewrites the pickle and result.json there after the job succeeded."""
    from airflow.sdk.bases.operator import ExecutorSafeguard
    from airflow.sdk.exceptions import TaskDeferred

    from airflow_stepop import VertexStepOperator
    from airflow_stepop.artifacts.storage import worker_storage

    monkeypatch.delenv("AIRFLOW__STEPOP__WORKER_UNPICKLE", raising=False)
    operator = VertexStepOperator(
        task_id="train", python_callable=steps.train, op_args=[[1, 2]], image_uri=BASE,
        machine_type="n1-standard-4",
    )  # fmt: skip
    ti = TryOf("vx_rewrites", f"r-{tmp_path.name}", "train")
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute({"ti": ti}, VertexStepOperator__sentinel=ExecutorSafeguard.sentinel_value)
    event = first_event(deferred.value.trigger)
    assert event["status"] == "succeeded", event

    assert_never_unpickled(
        operator, ti, event, worker_storage("google_cloud_default"), tmp_path / "unpickled", pickled
    )
