"""A Kubernetes step on a real cluster, when one is given (``STEPOP_LIVE=1``,
``STEPOP_LIVE_KUBECONFIG``, ``STEPOP_LIVE_KUBERNETES_ROOT``: an s3:// root the pods reach with
the signed URLs, signed with the machine's own AWS credentials; ``STEPOP_LIVE_KUBERNETES_IMAGE``,
default ``python:3.11-slim``; ``STEPOP_LIVE_KUBERNETES_NAMESPACE``, default ``default``).
Skipped otherwise: never run against the emulated stack."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from tests.integration.faults import trigger_for
from tests.integration.kubernetes.steps import answer
from tests.integration.rewrites import first_event


@pytest.mark.live("kubernetes")
def test_a_step_runs_as_one_job_on_a_real_cluster(monkeypatch):
    from airflow_stepop.artifacts.storage import worker_storage
    from airflow_stepop.backends.base import JobRequest
    from airflow_stepop.backends.kubernetes.backend import KubernetesBackend
    from airflow_stepop.backends.kubernetes.config import KubernetesJobConfig
    from airflow_stepop.backends.naming import job_name, task_key
    from airflow_stepop.backends.outcome import read_result
    from airflow_stepop.packaging.staging import StepIdentity, stage_step

    kubeconfig = os.path.expanduser(os.environ["STEPOP_LIVE_KUBECONFIG"])
    connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": kubeconfig}}
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_LIVE", json.dumps(connection))
    monkeypatch.setenv("AIRFLOW_CONN_AWS_LIVE", json.dumps({"conn_type": "aws"}))
    root = os.environ["STEPOP_LIVE_KUBERNETES_ROOT"].rstrip("/") + f"/live-{uuid.uuid4().hex[:6]}"
    image = os.environ.get("STEPOP_LIVE_KUBERNETES_IMAGE", "python:3.11-slim")
    namespace = os.environ.get("STEPOP_LIVE_KUBERNETES_NAMESPACE", "default")
    config = KubernetesJobConfig.from_arguments(
        "live",
        image_uri=image,
        docker=None,
        resources=None,
        artifact_root=None,
        ttl_after_finished=600,
    ).completed("live", artifact_root=root, connection_namespace=namespace, image_uri=image)
    backend = KubernetesBackend("kubernetes_live", job=config, storage_conn_id="aws_live")
    run_id = f"live-{uuid.uuid4().hex[:6]}"
    key = task_key("k8s_live", run_id, "answer", -1)
    storage = worker_storage("aws_live")
    staged = stage_step(answer, [], {}, root=root, step=StepIdentity("k8s_live", run_id,
                        "answer", -1, 1), storage=storage)  # fmt: skip
    request = JobRequest(job_name(key, 1), key, staged.spec_uri, staged.run_uri, staged.code_uri,
                         try_id=f"try-{run_id}")  # fmt: skip
    handle = backend.submit(request)
    try:
        event = first_event(trigger_for(backend, handle), timeout=900)
        assert event["status"] == "succeeded", event
        assert read_result(handle, storage, "aws_live").value == 42
        assert backend.find_active(key) is None
    finally:
        backend.stop(handle)
