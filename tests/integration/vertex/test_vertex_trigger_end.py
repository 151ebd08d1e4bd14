"""A Vertex AI step's trigger ends its task itself (``triggers/task_end``)."""

from __future__ import annotations

from tests.integration.fault_steps import fails, split
from tests.integration.faults import trigger_for
from tests.integration.task_end import (
    ANOTHER_PROCESS,
    assert_ended_failed,
    assert_ended_with_its_xcoms,
    end_task,
    in_a_triggerer,
)
from tests.integration.vertex.test_vertex_steps import _submit


def _trigger(backend, handle, **end):
    return trigger_for(
        backend, handle, storage_conn_id="google_cloud_default", deferred_by=ANOTHER_PROCESS,
        resume_hold=600, end_task=end_task(handle, **end),
    )  # fmt: skip


def test_a_success_ends_its_task_with_the_xcoms_and_billing(gcp, ctl, monkeypatch, capfd):
    comms = in_a_triggerer(monkeypatch)
    backend, handle = _submit(gcp, split, [2], task_id="split")
    xcoms = assert_ended_with_its_xcoms(
        _trigger(backend, handle, multiple_outputs=True), comms, capfd
    )
    assert xcoms["vertex_billing"]["machine"] == "n1-standard-4"


def test_a_raising_step_ends_its_task_failed(gcp, ctl, monkeypatch, capfd):
    comms = in_a_triggerer(monkeypatch)
    backend, handle = _submit(gcp, fails, ["bad input"], task_id="fails")
    assert_ended_failed(_trigger(backend, handle), comms, capfd)
