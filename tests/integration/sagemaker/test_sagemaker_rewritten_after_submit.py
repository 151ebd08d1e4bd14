"""A SageMaker job whose files were rewritten in S3 after its submit runs none of them.

The fake holds the job before its Downloading phase (``provisioning_delay``), the test rewrites
the code bundle (code channel), the spec, the entry script or the launch document (run channel)
in the bucket, and the job must fail before anything rewritten runs. A result rewritten in S3
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
from tests.integration.sagemaker.conftest import ROLE
from tests.step_modules import step_module

BASE = "127.0.0.1:5000/stepop-base/python:3.11-bookworm"
HOLD_S = 8.0


@pytest.fixture
def steps(tmp_path, monkeypatch):
    yield from step_module(tmp_path, monkeypatch, "sm_rewrite_steps", STEPS_SOURCE)


@pytest.mark.parametrize("kind", ["bundle", "spec", "entry", "launch"])
def test_a_file_rewritten_in_s3_after_submit_fails_the_job_before_any_of_it_runs(
    aws, ctl, steps, tmp_path, kind
):
    from airflow_stepop.artifacts.storage import worker_storage
    from airflow_stepop.backends.sagemaker.backend import SageMakerBackend, SageMakerJobConfig
    from airflow_stepop.backends.sagemaker.launch import ENTRY_FILE, LAUNCH_FILE

    backend = SageMakerBackend(
        job=SageMakerJobConfig(role=ROLE, instance_type="ml.m5.large", image_uri=BASE)
    )
    storage = worker_storage("aws_default")
    out, marker = tmp_path / "out", tmp_path / "marker"
    request = staged_request(
        steps.record, [str(out), "ran"], root=aws["root"], storage=storage,
        dag_id="sm_rewrites", task_id=kind,
    )  # fmt: skip
    ctl.add_faults({"kind": "provisioning_delay", "seconds": HOLD_S})
    held = Held(HOLD_S)
    handle = backend.submit(request)
    said = rewrite_staged(
        kind, request, storage, marker, entry_file=ENTRY_FILE, launch_file=LAUNCH_FILE
    )
    held.check()
    assert backend.describe(handle)["SecondaryStatus"] == "Starting"  # nothing downloaded yet

    event = first_event(trigger_for(backend, handle, storage_conn_id="aws_default"))
    assert_refused(event, storage, marker, *said)
    assert not out.exists()  # the step itself never ran either


def test_a_rewritten_result_and_pickle_in_s3_are_never_unpickled_on_the_worker(
    aws, ctl, steps, tmp_path, monkeypatch
):
    """The step's result is uploaded by the service (the job's output/model prefix); whoever
    may write the root rewrites the pickle and result.json there after the job succeeded."""
    from airflow.sdk.bases.operator import ExecutorSafeguard
    from airflow.sdk.exceptions import TaskDeferred

    from airflow_stepop import SageMakerStepOperator
    from airflow_stepop.artifacts.storage import worker_storage

    monkeypatch.delenv("AIRFLOW__STEPOP__WORKER_UNPICKLE", raising=False)
    operator = SageMakerStepOperator(
        task_id="train", python_callable=steps.train, op_args=[[1, 2]], image_uri=BASE,
        instance_type="ml.m5.large",
    )  # fmt: skip
    ti = TryOf("sm_rewrites", f"r-{tmp_path.name}", "train")
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(
            {"ti": ti}, SageMakerStepOperator__sentinel=ExecutorSafeguard.sentinel_value
        )
    event = first_event(deferred.value.trigger)
    assert event["status"] == "succeeded", event
    assert "/output/model" in event["handle"]["output_uri"]  # where the service uploaded it

    assert_never_unpickled(
        operator, ti, event, worker_storage("aws_default"), tmp_path / "unpickled", pickled
    )
