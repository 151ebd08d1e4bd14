"""An Azure ML step's trigger ends its task itself (``triggers/task_end``)."""

from __future__ import annotations

from tests.integration.azureml.test_azureml_steps import _submit
from tests.integration.fault_steps import fails, split
from tests.integration.faults import trigger_for
from tests.integration.task_end import (
    ANOTHER_PROCESS,
    assert_ended_failed,
    assert_ended_with_its_xcoms,
    end_task,
    in_a_triggerer,
)


def _trigger(backend, handle, **end):
    return trigger_for(
        backend, handle, deferred_by=ANOTHER_PROCESS, resume_hold=600,
        end_task=end_task(handle, **end),
    )  # fmt: skip


def test_a_success_ends_its_task_with_the_xcoms_and_billing(azure, ctl, monkeypatch, capfd):
    comms = in_a_triggerer(monkeypatch)
    backend, handle = _submit(azure, split, [2], "aml_trigger_end", "split")
    xcoms = assert_ended_with_its_xcoms(
        _trigger(backend, handle, multiple_outputs=True), comms, capfd
    )
    assert xcoms["azureml_billing"]["machine"] == "Standard_DS3_v2"


def test_a_raising_step_ends_its_task_failed(azure, ctl, monkeypatch, capfd):
    comms = in_a_triggerer(monkeypatch)
    backend, handle = _submit(azure, fails, ["bad input"], "aml_trigger_end", "fails")
    assert_ended_failed(_trigger(backend, handle), comms, capfd)
