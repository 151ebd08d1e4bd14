"""Container mode on an engine that cannot start the step's container: a clear error, and no
container left behind."""

from __future__ import annotations

import uuid

import pytest

from airflow_stepop import DockerSettings, ResourceSettings
from airflow_stepop.backends.base import JobRequest
from airflow_stepop.backends.local import LocalBackend
from airflow_stepop.backends.naming import job_name, task_key
from airflow_stepop.packaging.staging import StepIdentity, stage_step
from airflow_stepop.runtime.storage import Storage


@pytest.fixture
def engine():
    """The local container engine with the offline base image, or skip."""
    from tests.integration.conftest import BASE_IMAGE

    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env(timeout=60)
        client.images.get(BASE_IMAGE)
    except Exception as exc:  # no engine, or no base image: `scripts/engine.sh up` makes both
        pytest.skip(f"no container engine with {BASE_IMAGE} ({exc}); run scripts/engine.sh up")
    if "nvidia" in (client.info().get("Runtimes") or {}):
        pytest.skip("this engine can give containers GPUs: a GPU step's container starts")
    return client, BASE_IMAGE


@pytest.mark.container
def test_a_gpu_step_on_an_engine_without_gpus_fails_clearly_and_leaves_no_container(
    tmp_path, engine
):
    client, image = engine
    step = StepIdentity("dag", f"run-{uuid.uuid4().hex[:8]}", "wants_gpu", -1, 1)
    staged = stage_step(
        len, ["four"], {}, root=f"file://{tmp_path}/root", step=step, storage=Storage()
    )
    key = task_key(step.dag_id, step.run_id, step.task_id, step.map_index)
    name = job_name(key, 1)
    request = JobRequest(
        name,
        key,
        staged.spec_uri,
        staged.run_uri,
        staged.code_uri,
        resources=ResourceSettings(gpu_count=1),
        docker=DockerSettings(parent_image=image),
    )
    from airflow_stepop.backends.local_container import ContainerStartError

    try:
        with pytest.raises(ContainerStartError) as failed:
            LocalBackend(jobs_dir=str(tmp_path / "jobs")).submit(request)
        left = [c.name for c in client.containers.list(all=True, filters={"name": name})]
    finally:  # a failed test leaves nothing either
        for container in client.containers.list(all=True, filters={"name": name}):
            container.remove(force=True)

    assert left == []
    message = str(failed.value)
    assert f"The container of step job {name} could not start" in message
    assert "resources=ResourceSettings(gpu_count=1) asks the container engine for 1 GPU" in message
    assert "NVIDIA Container Toolkit" in message and "drop gpu_count" in message
    assert message.endswith("The container was removed.")
