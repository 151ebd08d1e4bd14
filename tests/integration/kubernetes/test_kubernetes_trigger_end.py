"""A Kubernetes step's trigger ends its task itself (``triggers/task_end``)."""

from __future__ import annotations

from tests.integration.fault_steps import fails, split
from tests.integration.faults import trigger_for
from tests.integration.kubernetes.test_kubernetes_faults import ctl, submit  # noqa: F401
from tests.integration.task_end import (
    ANOTHER_PROCESS,
    assert_ended_failed,
    assert_ended_with_its_xcoms,
    end_task,
    in_a_triggerer,
)


def _trigger(backend, handle, **end):
    return trigger_for(
        backend, handle, storage_conn_id="aws_default", deferred_by=ANOTHER_PROCESS,
        resume_hold=600, end_task=end_task(handle, **end),
    )  # fmt: skip


def test_a_success_ends_its_task_with_the_xcoms_and_billing(k8s, ctl, monkeypatch, capfd):  # noqa: F811
    comms = in_a_triggerer(monkeypatch)
    backend, handle = submit(k8s, split, [2])
    xcoms = assert_ended_with_its_xcoms(
        _trigger(backend, handle, multiple_outputs=True), comms, capfd
    )
    billing = xcoms["kubernetes_billing"]
    assert billing["count"] == 1 and billing["billable_seconds"] > 0
    # the finished Job's Secret, its signed URLs, is gone with the task's end
    from kubernetes import client

    from airflow_stepop.backends.kubernetes.clients import read_access, sync_client

    core = client.CoreV1Api(sync_client(read_access("kubernetes_default")))
    secrets = core.list_namespaced_secret("default").items
    assert f"{handle['job_id']}-stepop" not in {s.metadata.name for s in secrets}


def test_a_raising_step_ends_its_task_failed(k8s, ctl, monkeypatch, capfd):  # noqa: F811
    comms = in_a_triggerer(monkeypatch)
    backend, handle = submit(k8s, fails, ["bad input"])
    assert_ended_failed(_trigger(backend, handle), comms, capfd)
