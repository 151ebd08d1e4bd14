"""A Kubernetes step whose files were rewritten in S3 after its submit runs none of them.

The step's pod fetches the code bundle and the spec from the artifact root with signed URLs
when it starts; its entry script and launch document travel in the Job's Secret, their digests
in the pod's command, so the bucket holds nothing else it runs. The fake (this module's own,
``private_cluster``) keeps new pods unscheduled (``provisioning_delay``) while the test rewrites
the bundle or the spec, and the Job must fail before anything rewritten runs. A result
rewritten after the Job succeeded is never unpickled on the worker. See
tests/integration/rewrites.py.
"""

from __future__ import annotations

import pytest

from tests.integration.faults import trigger_for
from tests.integration.kubernetes.private_cluster import cluster, private_cluster  # noqa: F401
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
# The pod's entry script checks the bundle it downloaded before anything of it runs, and says
# so in its own words; a rewritten spec is refused by the step runtime, as on every backend.
REFUSED_BUNDLE = (
    "the code bundle is not the one this job was submitted with (sha256 differs); nothing ran"
)


@pytest.fixture
def steps(tmp_path, monkeypatch):
    yield from step_module(tmp_path, monkeypatch, "k8s_rewrite_steps", STEPS_SOURCE)


@pytest.mark.parametrize("kind", ["bundle", "spec"])
def test_a_file_rewritten_in_s3_after_submit_fails_the_job_before_any_of_it_runs(
    cluster,  # noqa: F811
    steps,
    tmp_path,
    kind,
):
    from airflow_stepop.artifacts.storage import worker_storage
    from airflow_stepop.backends.kubernetes.backend import KubernetesBackend
    from airflow_stepop.backends.kubernetes.config import KubernetesJobConfig

    config = KubernetesJobConfig.from_arguments(
        "test", image_uri=BASE, docker=None, resources=None, artifact_root=None
    ).completed("test", artifact_root=cluster["root"], connection_namespace="default",
                image_uri=BASE)  # fmt: skip
    backend = KubernetesBackend(job=config, storage_conn_id="aws_default")
    storage = worker_storage("aws_default")
    out, marker = tmp_path / "out", tmp_path / "marker"
    request = staged_request(
        steps.record, [str(out), "ran"], root=cluster["root"], storage=storage,
        dag_id="k8s_rewrites", task_id=kind,
    )  # fmt: skip
    cluster["ctl"].add_faults({"kind": "provisioning_delay", "seconds": HOLD_S})
    held = Held(HOLD_S)
    handle = backend.submit(request)
    said = rewrite_staged(kind, request, storage, marker)
    held.check()
    assert backend.status(handle).state == "pending"

    event = first_event(trigger_for(backend, handle, storage_conn_id="aws_default"))
    assert_refused(event, storage, marker, *((REFUSED_BUNDLE,) if kind == "bundle" else said))
    assert not out.exists()  # the step itself never ran either


def test_a_rewritten_result_and_pickle_are_never_unpickled_on_the_worker(
    cluster,  # noqa: F811
    steps,
    tmp_path,
    monkeypatch,
):
    """The pod uploads its result into the run directory with its signed URLs; whoever may
    write the root rewrites the pickle and result.json there after the Job succeeded."""
    from airflow.sdk.bases.operator import ExecutorSafeguard
    from airflow.sdk.exceptions import TaskDeferred

    from airflow_stepop import KubernetesStepOperator
    from airflow_stepop.artifacts.storage import worker_storage

    monkeypatch.delenv("AIRFLOW__STEPOP__WORKER_UNPICKLE", raising=False)
    operator = KubernetesStepOperator(
        task_id="train", python_callable=steps.train, op_args=[[1, 2]], image_uri=BASE
    )
    ti = TryOf("k8s_rewrites", f"r-{tmp_path.name}", "train")
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(
            {"ti": ti}, KubernetesStepOperator__sentinel=ExecutorSafeguard.sentinel_value
        )
    event = first_event(deferred.value.trigger)
    assert event["status"] == "succeeded", event

    assert_never_unpickled(
        operator, ti, event, worker_storage("aws_default"), tmp_path / "unpickled", pickled
    )
