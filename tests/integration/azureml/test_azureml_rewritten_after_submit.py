"""An Azure ML job whose files were rewritten in Blob storage after its submit runs none of them.

The fake holds the job while Preparing, before it downloads or mounts its inputs
(``provisioning_delay``); the test rewrites the code bundle (input ``code``), the spec, the entry
script or the launch document (input ``run``) in the container, and the job must fail before
anything rewritten runs. A result rewritten after the job succeeded is never unpickled on the
worker. See tests/integration/rewrites.py.
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
    yield from step_module(tmp_path, monkeypatch, "aml_rewrite_steps", STEPS_SOURCE)


@pytest.mark.parametrize("kind", ["bundle", "spec", "entry", "launch"])
def test_a_file_rewritten_in_blob_storage_after_submit_fails_the_job_before_any_of_it_runs(
    azure, ctl, steps, tmp_path, kind
):
    from airflow_stepop.artifacts.storage import worker_storage
    from airflow_stepop.backends.azureml.backend import AzureMLBackend
    from airflow_stepop.backends.azureml.config import AzureMLJobConfig
    from airflow_stepop.backends.azureml.launch import ENTRY_FILE, LAUNCH_FILE

    config = AzureMLJobConfig(image_uri=BASE, instance_type="Standard_DS3_v2",
                              max_runtime_s=600, experiment_name="aml_rewrites")  # fmt: skip
    backend = AzureMLBackend(job=config)
    storage = worker_storage(None)
    out, marker = tmp_path / "out", tmp_path / "marker"
    request = staged_request(
        steps.record, [str(out), "ran"], root=azure["root"], storage=storage,
        dag_id="aml_rewrites", task_id=kind,
    )  # fmt: skip
    ctl.add_faults({"kind": "provisioning_delay", "seconds": HOLD_S})
    held = Held(HOLD_S)
    handle = backend.submit(request)
    said = rewrite_staged(
        kind, request, storage, marker, entry_file=ENTRY_FILE, launch_file=LAUNCH_FILE
    )
    held.check()
    assert backend.status(handle).state == "pending"

    event = first_event(trigger_for(backend, handle))
    assert_refused(event, storage, marker, *said)
    assert not out.exists()  # the step itself never ran either


def test_a_rewritten_result_and_pickle_are_never_unpickled_on_the_worker(
    azure, ctl, steps, tmp_path, monkeypatch
):
    """The step's result is in the job's result output, which the service uploads; whoever may
    write the root rewrites the pickle and result.json there after the job succeeded."""
    from airflow.sdk.bases.operator import ExecutorSafeguard
    from airflow.sdk.exceptions import TaskDeferred

    from airflow_stepop import AzureMLStepOperator
    from airflow_stepop.artifacts.storage import worker_storage

    monkeypatch.delenv("AIRFLOW__STEPOP__WORKER_UNPICKLE", raising=False)
    operator = AzureMLStepOperator(
        task_id="train", python_callable=steps.train, op_args=[[1, 2]], image_uri=BASE,
        instance_type="Standard_DS3_v2",
    )  # fmt: skip
    ti = TryOf("aml_rewrites", f"r-{tmp_path.name}", "train")
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute({"ti": ti}, AzureMLStepOperator__sentinel=ExecutorSafeguard.sentinel_value)
    event = first_event(deferred.value.trigger)
    assert event["status"] == "succeeded", event

    assert_never_unpickled(
        operator, ti, event, worker_storage(None), tmp_path / "unpickled", pickled
    )
