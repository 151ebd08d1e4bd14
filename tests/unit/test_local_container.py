"""Container mode on an engine that cannot start the step's container, or a task interrupted
while its container is created: a clear error, and no container left behind."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

from airflow_stepop import DockerSettings, ResourceSettings
from airflow_stepop.backends.base import JobRequest
from airflow_stepop.backends.local.backend import LocalBackend
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


def _request(
    tmp_path, task_id: str, image: str, resources: ResourceSettings | None = None
) -> JobRequest:
    step = StepIdentity("dag", f"run-{uuid.uuid4().hex[:8]}", task_id, -1, 1)
    staged = stage_step(
        len, ["four"], {}, root=f"file://{tmp_path}/root", step=step, storage=Storage()
    )
    key = task_key(step.dag_id, step.run_id, step.task_id, step.map_index)
    return JobRequest(
        job_name(key, 1),
        key,
        staged.spec_uri,
        staged.run_uri,
        staged.code_uri,
        resources=resources,
        docker=DockerSettings(parent_image=image),
    )


@pytest.mark.container
def test_a_gpu_step_on_an_engine_without_gpus_fails_clearly_and_leaves_no_container(
    tmp_path, engine, caplog
):
    client, image = engine
    request = _request(tmp_path, "wants_gpu", image, ResourceSettings(gpu_type="T4"))
    name = request.job_name
    from airflow_stepop.backends.local.container import ContainerStartError

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
    wanted = "resources=ResourceSettings(gpu_count=1, gpu_type='T4')"  # as the step asked
    assert f"{wanted} asks the container engine for 1 GPU" in message
    assert "does not pick GPUs by model: gpu_type='T4' is not applied" in caplog.text
    assert "NVIDIA Container Toolkit" in message and "drop gpu_count" in message
    assert message.endswith("The container was removed.")


@pytest.mark.container
def test_a_task_timeout_while_its_container_is_created_leaves_no_container(
    tmp_path, engine, monkeypatch
):
    """``execution_timeout``'s alarm goes off while the engine creates the container (tens of
    seconds on vfs); the engine finishes a create whose caller left, so the task must wait for
    it and remove the container: nobody would come back for it."""
    from airflow.sdk.exceptions import AirflowTaskTimeout
    from airflow.sdk.execution_time.timeout import timeout
    from docker.models.containers import ContainerCollection

    client, image = engine
    request = _request(tmp_path, "times_out", image)
    name = request.job_name
    create = ContainerCollection.create

    def create_past_the_deadline(self, *args, **kwargs):
        signal.setitimer(signal.ITIMER_REAL, 0.05)  # the deadline passes during the create
        return create(self, *args, **kwargs)

    monkeypatch.setattr(ContainerCollection, "create", create_past_the_deadline)
    handler = signal.getsignal(signal.SIGALRM)
    since = int(time.time())
    try:
        with pytest.raises(AirflowTaskTimeout), timeout(seconds=600):
            LocalBackend(jobs_dir=str(tmp_path / "jobs")).submit(request)
        left = [c.name for c in client.containers.list(all=True, filters={"name": name})]
        # the engine's record of it, up to now (the stream ends at `until`)
        events = client.events(
            since=since, until=int(time.time()) + 1, filters={"container": name}, decode=True
        )
        actions = [event["Action"] for event in events]
    finally:  # a failed test leaves nothing either
        signal.signal(signal.SIGALRM, handler)
        for container in client.containers.list(all=True, filters={"name": name}):
            container.remove(force=True)

    assert left == []
    assert actions[:1] == ["create"] and actions[-1:] == ["destroy"], actions  # made, removed
    assert "start" not in actions  # an interrupted task's step never runs


def _oom_killed(memory: int) -> dict:
    """A container's ``inspect`` after the kernel killed its step for memory."""
    state = {"Status": "exited", "OOMKilled": True, "ExitCode": 137}
    return {"State": state, "HostConfig": {"Memory": memory}}


def test_a_step_out_of_memory_says_its_limit_and_what_raises_it():
    from airflow_stepop.backends.local.container import container_status

    limited = ResourceSettings(memory="512MiB").memory_bytes
    status = container_status(_oom_killed(limited), stopped=False)
    assert status.state == "failed"
    assert status.reason == (
        "OOMKilled: the container ran out of memory at its limit of 512MiB; "
        "resources=ResourceSettings(memory=...) sets that limit: raise it, e.g. memory='1GiB'."
    )

    unlimited = container_status(_oom_killed(0), stopped=False)  # the host's memory ran out
    assert unlimited.state == "failed"
    assert "it had no memory limit of its own (no ResourceSettings(memory=...))" in (
        unlimited.reason
    )


@pytest.mark.container
def test_a_parent_image_that_does_not_exist_fails_naming_the_setting_and_the_fix(tmp_path, engine):
    registry = os.environ.get("STEPOP_REGISTRY", "127.0.0.1:5000")
    missing = f"{registry}/stepop-no-such-image:{uuid.uuid4().hex[:8]}"
    request = _request(tmp_path, "no_parent", missing)
    with pytest.raises(RuntimeError) as failed:  # a message, not the SDK's NotFound traceback
        LocalBackend(jobs_dir=str(tmp_path / "jobs")).submit(request)
    message = str(failed.value)
    assert message.startswith(f"DockerSettings.parent_image={missing!r} cannot be pulled")
    assert "manifest unknown" in message or "not found" in message  # the engine's reason
    assert "Check the image's name and tag" in message and "logged in" in message
