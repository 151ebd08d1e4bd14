"""A Kubernetes step's job when things go wrong on the cluster, each in the cluster's words:
a user's kill, OOMKilled, an image that cannot be pulled, no node that fits, an eviction, the
deadline; and Kueue's queue, several pods, re-attach. Jobs are submitted straight through the
backend (no DAG) and followed by the trigger the operator defers to."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import uuid
from typing import Any

import pytest

from airflow_stepop.backends.kubernetes.backend import KubernetesBackend
from airflow_stepop.backends.kubernetes.config import KubernetesJobConfig
from cloud.control import FakeControl
from tests.integration.faults import trigger_for
from tests.integration.kubernetes.steps import answer, held_saving, ranks
from tests.integration.rewrites import first_event
from tests.waiting import wait_for

BASE = "127.0.0.1:5000/stepop-base/python:3.11-bookworm"


@pytest.fixture
def ctl(k8s) -> FakeControl:
    control = FakeControl(k8s["fake"])
    control.clear_faults()
    yield control
    control.clear_faults()
    with contextlib.suppress(Exception):
        control.call("DELETE", "queues")


def submit(k8s, function, args, *, resources=None, image=BASE, **arguments) -> tuple[Any, dict]:
    """Stage ``function(*args)`` and start its Job through the backend: (backend, handle)."""
    from airflow_stepop.artifacts.storage import worker_storage
    from airflow_stepop.backends.base import JobRequest
    from airflow_stepop.backends.naming import job_name, task_key
    from airflow_stepop.packaging.staging import StepIdentity, stage_step

    config = KubernetesJobConfig.from_arguments(
        "test", image_uri=image, docker=None, resources=resources, artifact_root=None, **arguments
    ).completed("test", artifact_root=k8s["root"], connection_namespace="default",
                image_uri=image)  # fmt: skip
    store = "aws_default" if k8s["root"].startswith("s3://") else None
    backend = KubernetesBackend(job=config, storage_conn_id=store)
    run_id = f"run-{uuid.uuid4().hex[:6]}"
    key = task_key("k8s_direct", run_id, function.__name__, -1)
    step = StepIdentity("k8s_direct", run_id, function.__name__, -1, 1)
    staged = stage_step(function, list(args), {}, root=k8s["root"], step=step,
                        storage=worker_storage(store))  # fmt: skip
    request = JobRequest(job_name(key, 1), key, staged.spec_uri, staged.run_uri,
                         staged.code_uri, resources=resources, try_id=f"try-{run_id}")  # fmt: skip
    return backend, backend.submit(request)


def event_of(backend, handle, **kwargs) -> dict[str, Any]:
    return first_event(trigger_for(backend, handle, **kwargs), timeout=120)


def test_a_users_kill_deletes_the_job_and_relays_its_last_lines(k8s, ctl, capfd):
    release = k8s["results"] / "never"
    backend, handle = submit(k8s, held_saving, [str(release)])
    trigger = trigger_for(backend, handle)

    async def user_kills_the_task() -> None:
        waiting = asyncio.ensure_future(anext(aiter(trigger.run())))
        started = release.with_name("never.started")
        await asyncio.to_thread(wait_for, started.exists, 60, "the step to run")
        reads = ctl.counters().get("readCoreV1NamespacedPodLog", 0)
        await asyncio.to_thread(  # the trigger follows the log: the kill relays from there
            wait_for, lambda: ctl.counters().get("readCoreV1NamespacedPodLog", 0) > reads, 60,
            "the trigger to read the pod's log",
        )  # fmt: skip
        waiting.cancel()  # as the triggerer does on a user's kill: cancel, then on_kill
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        await trigger.on_kill()

    asyncio.run(user_kills_the_task())
    wait_for(lambda: _gone(backend, handle), 60, "the Job to be deleted, pods and all")
    logged = capfd.readouterr()
    assert "saving my work on the way out" in logged.out + logged.err


def test_an_oom_killed_step_fails_saying_so(k8s, ctl):
    ctl.add_faults({"kind": "oom_kill", "match": "held-saving"})
    backend, handle = submit(k8s, held_saving, [str(k8s["results"] / "never")])
    event = event_of(backend, handle)
    assert event["status"] == "failed"
    assert event["reason"].startswith("OOMKilled") and "ResourceSettings(memory" in event["reason"]


def test_an_image_that_cannot_be_pulled_fails_the_step_naming_it(k8s, ctl):
    image = "127.0.0.1:5000/stepop-it/no-such-image:1"
    ctl.add_faults({"kind": "image_pull", "match": "no-such-image"})
    backend, handle = submit(k8s, answer, [], image=image, schedule_timeout=3)
    event = event_of(backend, handle)  # "not found" at once, or a back-off past the timeout
    assert event["status"] == "failed"
    assert "ImagePullBackOff" in event["reason"] or "ErrImagePull" in event["reason"]
    assert image in event["reason"]
    wait_for(lambda: _gone(backend, handle), 60, "the stuck Job to be deleted")


def test_a_pod_no_node_fits_says_why_then_fails_after_the_schedule_timeout(k8s, ctl, capfd):
    from airflow_stepop import ResourceSettings

    backend, handle = submit(k8s, answer, [], resources=ResourceSettings(gpu_count=8),
                             schedule_timeout=3)  # fmt: skip
    event = event_of(backend, handle)
    assert event["status"] == "failed"
    assert "kubernetes_schedule_timeout" in event["reason"]
    assert "Insufficient nvidia.com/gpu" in event["reason"]
    logged = capfd.readouterr()
    waiting = [line for line in (logged.out + logged.err).splitlines() if ": pending, " in line]
    assert any("Insufficient nvidia.com/gpu" in line for line in waiting), waiting


def test_a_namespace_quota_that_refuses_the_pod_is_said_then_fails_the_step(k8s, ctl, capfd):
    from kubernetes import client

    from airflow_stepop import ResourceSettings
    from airflow_stepop.backends.kubernetes.clients import read_access, sync_client

    core = client.CoreV1Api(sync_client(read_access("kubernetes_default")))
    name = f"gpu-quota-{uuid.uuid4().hex[:6]}"
    quota = {"metadata": {"name": name}, "spec": {"hard": {"requests.nvidia.com/gpu": "0"}}}
    core.create_namespaced_resource_quota("default", quota)
    try:
        backend, handle = submit(k8s, answer, [], resources=ResourceSettings(gpu_count=1),
                                 schedule_timeout=8)  # fmt: skip
        event = event_of(backend, handle)
    finally:
        core.delete_namespaced_resource_quota(name, "default")
    assert event["status"] == "failed"
    assert (
        event["reason"].startswith("FailedCreate")
        and "kubernetes_schedule_timeout" in event["reason"]
    )
    assert f"exceeded quota: {name}, requested: requests.nvidia.com/gpu=1" in event["reason"]
    logged = capfd.readouterr()
    waiting = [line for line in (logged.out + logged.err).splitlines() if ": pending, " in line]
    assert any("exceeded quota" in line for line in waiting), waiting  # said while it waited
    wait_for(lambda: _gone(backend, handle), 60, "the Job to be deleted")


def test_an_evicted_pod_fails_the_step_in_kubernetes_words(k8s, ctl):
    backend, handle = submit(k8s, held_saving, [str(k8s["results"] / "never")])
    wait_for(lambda: backend.status(handle).state == "running", 60, "the pod to run")
    ctl.add_faults({"kind": "evict", "match": handle["job_id"]})
    event = event_of(backend, handle)
    assert event["status"] == "failed" and event["reason"].startswith("Evicted"), event


def test_a_step_past_its_max_runtime_fails_with_the_deadline(k8s, ctl):
    backend, handle = submit(k8s, held_saving, [str(k8s["results"] / "never")], max_runtime=2)
    event = event_of(backend, handle)
    assert event["status"] == "failed"
    assert event["reason"].startswith("DeadlineExceeded") and "=2)" in event["reason"]


def test_a_kueue_step_waits_queued_until_admitted(k8s, ctl, capfd):
    closed = {"gpus": 0, "max_jobs": 0, "namespaces": ["default"]}
    ctl.call("POST", "queues", {"queues": {"user-queue": closed}})
    backend, handle = submit(k8s, answer, [], queue_name="user-queue")
    polls = ctl.counters().get("listBatchV1NamespacedJob", 0)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        following = pool.submit(event_of, backend, handle)
        wait_for(lambda: ctl.counters().get("listBatchV1NamespacedJob", 0) > polls + 1, 60,
                 "the trigger to poll the queued Job")  # fmt: skip
        ctl.call("POST", "queues", {"queues": {"user-queue": {**closed, "gpus": 4,
                                                             "max_jobs": None}}})  # fmt: skip
        event = following.result(timeout=120)
    assert event["status"] == "succeeded", event
    logged = capfd.readouterr()
    assert "queued for capacity since" in logged.out + logged.err


def test_several_pods_get_their_ranks_and_rank_zero_gives_the_result(k8s, ctl, capfd):
    from airflow_stepop.backends.outcome import read_result

    backend, handle = submit(k8s, ranks, [], instance_count=2)
    event = event_of(backend, handle)
    assert event["status"] == "succeeded", event
    from airflow_stepop.artifacts.storage import worker_storage

    value = read_result(handle, worker_storage("aws_default"), "aws_default").value
    assert value["RANK"] == "0" and value["WORLD_SIZE"] == "2"
    assert value["MASTER_ADDR"] == f"{handle['job_id']}-0.{handle['job_id']}"
    logged = capfd.readouterr()
    assert "[1] rank 1 of 2" in logged.out + logged.err


def test_a_retry_finds_the_running_job_of_its_task_instance(k8s, ctl):
    backend, handle = submit(k8s, held_saving, [str(k8s["results"] / "release")])
    found = backend.find_active(handle["task_key"])
    assert found is not None and found["job_id"] == handle["job_id"]
    assert found["run_uri"] == handle["run_uri"] and found["output_uri"] == handle["output_uri"]
    (k8s["results"] / "release").touch()
    assert event_of(backend, handle)["status"] == "succeeded"
    assert backend.find_active(handle["task_key"]) is None  # ended: nothing to attach to


def test_a_namespace_that_does_not_exist_is_refused_naming_it(k8s, ctl):
    from airflow_stepop.settings import SettingsError

    with pytest.raises(SettingsError) as refused:
        submit(k8s, answer, [], namespace="no-such-team")
    assert "'no-such-team' does not exist" in str(refused.value)
    assert "kubectl create namespace no-such-team" in str(refused.value)


def _gone(backend, handle) -> bool:
    try:
        backend.status(handle)
    except Exception as exc:
        return backend.is_gone(exc)
    return False


def test_a_file_root_on_a_shared_volume_needs_no_urls(k8s, ctl, tmp_path):
    from airflow_stepop.artifacts.storage import worker_storage
    from airflow_stepop.backends.outcome import read_result

    root = tmp_path / "shared"
    volume = {"hostPath": {"path": str(root), "type": "DirectoryOrCreate"}}
    backend, handle = submit({**k8s, "root": f"file://{root}"}, answer, [],
                             artifact_volume=volume)  # fmt: skip
    assert event_of(backend, handle)["status"] == "succeeded"
    assert read_result(handle, worker_storage(None), None).value == 42
    assert handle["output_uri"] == handle["run_uri"]  # written in place, on the volume
