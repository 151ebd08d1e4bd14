"""A SageMaker step's trigger ends its task itself (``triggers/task_end``): the result's
XComs and the billing record, or the failure, with no second task process and no hold."""

from __future__ import annotations

from tests.integration.fault_steps import fails, split
from tests.integration.faults import trigger_for
from tests.integration.sagemaker.test_sagemaker_steps import _submit
from tests.integration.task_end import (
    ANOTHER_PROCESS,
    assert_ended_failed,
    assert_ended_with_its_xcoms,
    end_task,
    ending_event,
    in_a_triggerer,
)


def _trigger(backend, handle, hold=600, **end):
    return trigger_for(
        backend, handle, storage_conn_id="aws_default", deferred_by=ANOTHER_PROCESS,
        resume_hold=hold, end_task=end_task(handle, **end),
    )  # fmt: skip


def test_a_success_ends_its_task_with_the_xcoms_and_billing(aws, ctl, monkeypatch, capfd):
    comms = in_a_triggerer(monkeypatch)
    backend, handle = _submit(aws, split, [2], "sm_trigger_end", "split")
    xcoms = assert_ended_with_its_xcoms(
        _trigger(backend, handle, multiple_outputs=True), comms, capfd
    )
    assert xcoms["sagemaker_billing"]["machine"] == "ml.m5.large"
    assert ctl.counters()["CreateTrainingJob"] == 1


def test_a_raising_step_ends_its_task_failed(aws, ctl, monkeypatch, capfd):
    comms = in_a_triggerer(monkeypatch)
    backend, handle = _submit(aws, fails, ["bad input"], "sm_trigger_end", "fails")
    assert_ended_failed(_trigger(backend, handle), comms, capfd)


def test_a_capacity_failure_is_left_to_the_worker_to_fail_over(aws, ctl, monkeypatch):
    """The worker starts the next machine type: the trigger sends its usual event."""
    comms = in_a_triggerer(monkeypatch)
    ctl.add_faults({"kind": "capacity", "machine": "ml.m5.large"})
    backend, handle = _submit(aws, split, [2], "sm_trigger_end", "short")
    event = ending_event(_trigger(backend, handle, hold=0, capacity_failover=True))
    assert type(event).__name__ == "TriggerEvent"
    assert (event.payload["status"], event.payload["capacity"]) == ("failed", True)
    assert comms.xcoms() == {}
