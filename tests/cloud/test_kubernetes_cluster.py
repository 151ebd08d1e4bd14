"""Self-tests of the Kubernetes fake's cluster through the official sync client: Indexed Jobs,
the scheduler and GPUs, Kueue, Secrets, deletion and garbage collection, TTL, deadlines, and
the faults of its control API (eviction, OOM kill, image pulls).

The fixtures and helpers are test_kubernetes.py's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cloud.control import FakeControl
from tests.cloud.test_kubernetes import (  # noqa: F401 - the fixtures api, kube, _clean_faults
    NS,
    _clean_faults,
    api,
    conditions,
    events,
    finished,
    job_body,
    job_pods,
    kube,
    one_pod,
    pod_log,
    running_pod,
    status_of,
    unique,
)
from tests.waiting import wait_for

GPU_PRODUCT = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.fixture(scope="module")
def batch(api: client.ApiClient) -> client.BatchV1Api:  # noqa: F811 - api is a fixture
    return client.BatchV1Api(api)


@pytest.fixture(scope="module")
def core(api: client.ApiClient) -> client.CoreV1Api:  # noqa: F811 - api is a fixture
    return client.CoreV1Api(api)


@pytest.fixture(scope="module")
def ctl(kube: dict[str, str]) -> FakeControl:  # noqa: F811 - kube is a fixture
    return FakeControl(kube["STEPOP_KUBERNETES_ENDPOINT"])


def gpu_job(name: str, image: str, action: str, gpus: int, **options: Any) -> dict[str, Any]:
    """A Job whose pod asks for ``gpus`` GPUs (as a limit) on the GPU node."""
    pod_spec = {"nodeSelector": GPU_PRODUCT, "tolerations": GPU_TOLERATION}
    pod_spec.update(options.pop("pod_spec", {}))
    return job_body(
        name,
        image,
        action,
        resources={"limits": {"nvidia.com/gpu": str(gpus)}},
        pod_spec=pod_spec,
        **options,
    )


def gone(read: Any, *args: Any) -> bool:
    """Whether reading the object answers 404."""
    try:
        read(*args)
    except ApiException as err:
        if err.status == 404:
            return True
        raise
    return False


def delete_job(batch: client.BatchV1Api, name: str, policy: str = "Background") -> None:
    batch.delete_namespaced_job(name, NS, propagation_policy=policy)


def scheduled(core: client.CoreV1Api, pod: Any) -> tuple[str, str | None, str | None]:
    """(status, reason, message) of the pod's PodScheduled condition."""
    current = core.read_namespaced_pod(pod.metadata.name, NS)
    found = next((c for c in current.status.conditions or [] if c.type == "PodScheduled"), None)
    return (found.status, found.reason, found.message) if found else ("", None, None)


def ran(ctl: FakeControl, pod: str) -> dict[str, Any]:
    """What the kubelet records of the pod's run (``/_fake/ran``)."""
    return next(r for r in ctl.call("GET", "ran")["ran"] if r["pod"] == pod)


# --- Indexed Jobs -------------------------------------------------------------------------------
def test_an_indexed_job_gives_each_pod_its_rank(
    batch: client.BatchV1Api, core: client.CoreV1Api, ctl: FakeControl, registry_image: str
) -> None:
    name = unique("ranks")
    core.create_namespaced_service(
        NS,
        {
            "metadata": {"name": name},
            "spec": {"clusterIP": "None", "selector": {"batch.kubernetes.io/job-name": name}},
        },
    )
    rank = {
        "name": "RANK",
        "valueFrom": {
            "fieldRef": {
                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
            }
        },
    }
    master = {"name": "MASTER_ADDR", "value": f"{name}-0.{name}"}
    body = job_body(
        name,
        registry_image,
        "env",
        "JOB_COMPLETION_INDEX",
        "RANK",
        "MASTER_ADDR",
        env=[rank, master],
        completions=3,
        parallelism=3,
        completionMode="Indexed",
        pod_spec={"subdomain": name},
    )
    batch.create_namespaced_job(NS, body)
    job = finished(batch, name)
    assert conditions(job)["Complete"] == ("True", "CompletionsReached")
    assert (job.status.succeeded, job.status.completed_indexes) == (3, "0-2")
    pods = sorted(job_pods(core, name), key=lambda p: p.spec.hostname)
    for index, pod in enumerate(pods):
        assert pod.metadata.name.startswith(f"{name}-{index}-")
        assert pod.spec.hostname == f"{name}-{index}" and pod.spec.subdomain == name
        key = "batch.kubernetes.io/job-completion-index"
        assert pod.metadata.labels[key] == pod.metadata.annotations[key] == str(index)
        assert pod_log(core, pod.metadata.name).splitlines()[1:] == [
            f"JOB_COMPLETION_INDEX={index}",
            f"RANK={index}",
            "MASTER_ADDR=127.0.0.1",
        ]
        assert ran(ctl, pod.metadata.name)["hostname"] == f"{name}-{index}"
    delete_job(batch, name)
    core.delete_namespaced_service(name, NS)


# --- the scheduler ------------------------------------------------------------------------------
def test_a_pod_waits_for_gpus_with_the_schedulers_message(
    batch: client.BatchV1Api, core: client.CoreV1Api, registry_image: str
) -> None:
    holder, waiter, untolerated = unique("hold"), unique("wait"), unique("taint")
    batch.create_namespaced_job(NS, gpu_job(holder, registry_image, "sleep", 4))
    assert running_pod(core, holder).spec.node_name == "gpu-node-1"
    batch.create_namespaced_job(NS, gpu_job(waiter, registry_image, "ok", 1))
    batch.create_namespaced_job(
        NS, gpu_job(untolerated, registry_image, "ok", 1, pod_spec={"tolerations": []})
    )
    waiting = one_pod(core, waiter)
    message = (
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's "
        "node affinity/selector. preemption: 0/2 nodes are available: 1 No preemption victims "
        "found for incoming pod, 1 Preemption is not helpful for scheduling."
    )
    wait_for(
        lambda: scheduled(core, waiting) == ("False", "Unschedulable", message),
        10,
        "the Unschedulable condition",
    )
    assert core.read_namespaced_pod(waiting.metadata.name, NS).status.phase == "Pending"
    failed = core.list_namespaced_event(
        NS, field_selector=(f"involvedObject.name={waiting.metadata.name},reason=FailedScheduling")
    ).items
    assert [(e.type, e.source.component, e.message) for e in failed] == [
        ("Warning", "default-scheduler", message)
    ]
    tainted = one_pod(core, untolerated)
    wait_for(
        lambda: (
            "had untolerated taint {nvidia.com/gpu: present}" in (scheduled(core, tainted)[2] or "")
        ),
        10,
        "the taint in the message",
    )

    delete_job(batch, holder)  # its pod goes: room for the waiting one
    job = finished(batch, waiter)
    assert conditions(job)["Complete"][0] == "True"
    assert job_pods(core, waiter)[0].spec.node_name == "gpu-node-1"
    assert scheduled(core, tainted)[0] == "False"
    delete_job(batch, untolerated)


def test_the_nodes_can_be_replaced(core: client.CoreV1Api, ctl: FakeControl) -> None:
    h100 = {
        "name": "h100-node",
        "capacity": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"},
        "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    }
    try:
        ctl.call("POST", "nodes", {"nodes": [h100]})
        (node,) = core.list_node().items
        assert (node.metadata.name, node.status.allocatable["nvidia.com/gpu"]) == ("h100-node", "8")
        assert node.metadata.labels["nvidia.com/gpu.count"] == "8"
        assert node.spec.taints is None
    finally:
        ctl.call("DELETE", "nodes")
    assert [n.metadata.name for n in core.list_node().items] == ["cpu-node-1", "gpu-node-1"]


def test_a_scheduling_delay_holds_new_pods(
    batch: client.BatchV1Api, core: client.CoreV1Api, ctl: FakeControl, registry_image: str
) -> None:
    ctl.add_faults({"kind": "provisioning_delay", "seconds": 3600})
    name = unique("delayed")
    batch.create_namespaced_job(NS, job_body(name, registry_image, "ok"))
    # the pass that counts a new pod active also places it, unless the scheduler is held
    wait_for(lambda: batch.read_namespaced_job_status(name, NS).status.active == 1, 10, "a pod")
    (pod,) = job_pods(core, name)
    assert pod.spec.node_name is None and pod.status.conditions is None
    ctl.clear_faults()
    assert conditions(finished(batch, name))["Complete"][0] == "True"


# --- Kueue --------------------------------------------------------------------------------------
def test_kueue_admits_queued_jobs_as_its_quota_frees(
    batch: client.BatchV1Api, core: client.CoreV1Api, ctl: FakeControl, registry_image: str
) -> None:
    first, second, lost = unique("first"), unique("second"), unique("lost")
    queue = {"kueue.x-k8s.io/queue-name": "user-queue"}
    created = batch.create_namespaced_job(
        NS, gpu_job(first, registry_image, "sleep", 4, labels=queue)
    )
    assert created.spec.suspend is True  # Kueue's webhook suspends it
    batch.create_namespaced_job(NS, gpu_job(second, registry_image, "ok", 4, labels=queue))
    batch.create_namespaced_job(
        NS, job_body(lost, registry_image, "ok", labels={"kueue.x-k8s.io/queue-name": "no-such"})
    )
    running_pod(core, first)
    admitted = batch.read_namespaced_job(first, NS)
    assert conditions(admitted)["Suspended"] == ("False", "JobResumed")
    assert ("Normal", "Started", "Admitted by clusterQueue cluster-queue") in events(core, first)
    waiting = batch.read_namespaced_job(second, NS)
    assert waiting.spec.suspend is True and job_pods(core, second) == []
    assert ctl.call("GET", "queues")["admitted"]["user-queue"] == [f"{NS}/{first}"]

    delete_job(batch, first, "Foreground")
    assert conditions(finished(batch, second))["Complete"][0] == "True"
    assert conditions(batch.read_namespaced_job(lost, NS))["Suspended"] == ("True", "JobSuspended")
    assert job_pods(core, lost) == []
    delete_job(batch, lost)


# --- Secrets ------------------------------------------------------------------------------------
def test_a_secret_volume_waits_for_its_secret_then_has_its_files(
    batch: client.BatchV1Api, core: client.CoreV1Api, registry_image: str
) -> None:
    name = unique("secret")
    volume = {
        "name": "creds",
        "secret": {
            "secretName": name,
            "defaultMode": 0o440,
            "items": [{"key": "token", "path": "sub/token.txt"}],
        },
    }
    token = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": name, "key": "token"}}}
    body = job_body(
        name,
        registry_image,
        "file",
        "/creds/sub/token.txt",
        volumes=[volume],
        mounts=[{"name": "creds", "mountPath": "/creds"}],
        env=[token],
    )
    batch.create_namespaced_job(NS, body)
    pod = one_pod(core, name).metadata.name
    mount_failed = f'MountVolume.SetUp failed for volume "creds" : secret "{name}" not found'
    wait_for(
        lambda: ("Warning", "FailedMount", mount_failed) in events(core, pod),
        10,
        "the FailedMount event",
    )
    state = core.read_namespaced_pod(pod, NS).status.container_statuses[0].state
    assert state.waiting.reason == "ContainerCreating"
    with pytest.raises(ApiException) as early:
        pod_log(core, pod)
    assert status_of(early.value)["message"] == (
        f'container "main" in pod "{pod}" is waiting to start: ContainerCreating'
    )

    core.create_namespaced_secret(
        NS, {"metadata": {"name": name}, "stringData": {"token": "s3cret"}}
    )
    assert core.read_namespaced_secret(name, NS).data == {"token": "czNjcmV0"}
    assert conditions(finished(batch, name))["Complete"][0] == "True"
    assert pod_log(core, pod).splitlines()[1] == "content=s3cret mode=0o440 env=s3cret"
    delete_job(batch, name)
    core.delete_namespaced_secret(name, NS)
    assert gone(core.read_namespaced_secret, name, NS)


def test_working_dir_and_a_claims_directory(
    kube: dict[str, str],  # noqa: F811 - a fixture
    batch: client.BatchV1Api,
    core: client.CoreV1Api,
    registry_image: str,
) -> None:
    name = unique("pvc")
    body = job_body(
        name,
        registry_image,
        "write",
        "/data/out.txt",
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": name}}],
        mounts=[{"name": "data", "mountPath": "/data"}],
    )
    body["spec"]["template"]["spec"]["containers"][0]["workingDir"] = "/work-dir"
    batch.create_namespaced_job(NS, body)
    assert conditions(finished(batch, name))["Complete"][0] == "True"
    pod = job_pods(core, name)[0].metadata.name
    assert pod_log(core, pod).splitlines()[1].endswith("/work-dir")
    claim = Path(kube["STEPOP_CLOUD_DIR"]) / "kubernetes" / "pvc" / NS / name
    assert (claim / "out.txt").read_text() == "written"  # kept after the pod


# --- deletion and garbage collection ------------------------------------------------------------
def test_foreground_delete_stops_the_pod_and_collects_owned_objects(
    batch: client.BatchV1Api, core: client.CoreV1Api, ctl: FakeControl, registry_image: str
) -> None:
    name = unique("fg")
    job = batch.create_namespaced_job(NS, job_body(name, registry_image, "sleep"))
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job.metadata.uid}]
    core.create_namespaced_secret(
        NS, {"metadata": {"name": name, "ownerReferences": owner}, "stringData": {"k": "v"}}
    )
    core.create_namespaced_service(
        NS, {"metadata": {"name": name, "ownerReferences": owner}, "spec": {"clusterIP": "None"}}
    )
    pod = running_pod(core, name).metadata.name

    options = client.V1DeleteOptions(propagation_policy="Foreground")  # in the body
    answer = batch.delete_namespaced_job(name, NS, body=options, _preload_content=False)
    deleting = json.loads(answer.data)
    assert deleting["kind"] == "Job" and deleting["metadata"]["deletionTimestamp"]
    assert deleting["metadata"]["finalizers"] == ["foregroundDeletion"]
    wait_for(lambda: gone(batch.read_namespaced_job, name, NS), 20, "the Job to go")
    assert gone(core.read_namespaced_pod, pod, NS)
    assert gone(core.read_namespaced_secret, name, NS)
    assert gone(core.read_namespaced_service, name, NS)
    assert ("Normal", "Killing", "Stopping container main") in events(core, pod)
    assert ran(ctl, pod)["exitCode"] == 143  # it stopped on SIGTERM


def test_deleting_a_job_orphans_its_pods_by_default(
    batch: client.BatchV1Api, core: client.CoreV1Api, registry_image: str
) -> None:
    name = unique("orphan")
    batch.create_namespaced_job(NS, job_body(name, registry_image, "sleep"))
    pod = running_pod(core, name).metadata.name
    batch.delete_namespaced_job(name, NS)
    wait_for(lambda: gone(batch.read_namespaced_job, name, NS), 10, "the Job to go")
    orphan = wait_for(
        lambda: (p := core.read_namespaced_pod(pod, NS)).metadata.owner_references is None and p,
        10,
        "the pod to lose its owner",
    )
    assert orphan.status.phase == "Running"
    deleted = core.delete_namespaced_pod(pod, NS, grace_period_seconds=5)
    assert deleted.metadata.deletion_timestamp is not None
    assert deleted.metadata.deletion_grace_period_seconds == 5
    wait_for(lambda: gone(core.read_namespaced_pod, pod, NS), 10, "the pod to go")
    assert ("Normal", "Killing", "Stopping container main") in events(core, pod)


def test_ttl_after_finished_deletes_the_job_and_its_pods(
    batch: client.BatchV1Api, core: client.CoreV1Api, registry_image: str
) -> None:
    name = unique("ttl")
    batch.create_namespaced_job(NS, job_body(name, registry_image, "ok", ttlSecondsAfterFinished=1))
    finished(batch, name)
    pod = job_pods(core, name)[0].metadata.name
    wait_for(lambda: gone(batch.read_namespaced_job, name, NS), 15, "the TTL to delete the Job")
    assert gone(core.read_namespaced_pod, pod, NS)


def test_the_active_deadline_fails_the_job_and_kills_its_pod(
    batch: client.BatchV1Api, core: client.CoreV1Api, ctl: FakeControl, registry_image: str
) -> None:
    name = unique("deadline")
    batch.create_namespaced_job(
        NS, job_body(name, registry_image, "sleep", activeDeadlineSeconds=3)
    )
    pod = running_pod(core, name).metadata.name
    job = finished(batch, name)
    assert conditions(job)["Failed"] == ("True", "DeadlineExceeded")
    message = "Job was active longer than specified deadline"
    assert ("Warning", "DeadlineExceeded", message) in events(core, name)
    assert ("Normal", "SuccessfulDelete", f"Deleted pod: {pod}") in events(core, name)
    wait_for(lambda: gone(core.read_namespaced_pod, pod, NS), 10, "the pod to go")
    assert ran(ctl, pod)["exitCode"] == 143  # SIGTERM, as the job controller deleted it


# --- faults -------------------------------------------------------------------------------------
def test_an_evicted_pod_fails_with_a_disruption_target(
    batch: client.BatchV1Api, core: client.CoreV1Api, ctl: FakeControl, registry_image: str
) -> None:
    name = unique("evict")
    batch.create_namespaced_job(NS, job_body(name, registry_image, "sleep"))
    pod = running_pod(core, name).metadata.name
    ctl.add_faults({"kind": "evict", "match": pod})
    job = finished(batch, name)
    assert conditions(job)["Failed"] == ("True", "BackoffLimitExceeded")
    evicted = core.read_namespaced_pod(pod, NS)
    assert (evicted.status.phase, evicted.status.reason) == ("Failed", "Evicted")
    assert evicted.status.message.startswith("The node was low on resource: memory.")
    target = next(c for c in evicted.status.conditions if c.type == "DisruptionTarget")
    assert (target.status, target.reason) == ("True", "TerminationByKubelet")
    assert evicted.status.container_statuses[0].state.terminated.exit_code == 137
    assert ("Warning", "Evicted", evicted.status.message) in events(core, pod)
    assert ctl.faults() == []  # the rule evicted one pod and retired


def test_an_oom_killed_container_says_so(
    batch: client.BatchV1Api, core: client.CoreV1Api, ctl: FakeControl, registry_image: str
) -> None:
    name = unique("oom")
    batch.create_namespaced_job(NS, job_body(name, registry_image, "sleep"))
    pod = running_pod(core, name).metadata.name
    ctl.add_faults({"kind": "oom_kill", "match": pod})
    assert conditions(finished(batch, name))["Failed"][0] == "True"
    terminated = core.read_namespaced_pod(pod, NS).status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (137, "OOMKilled")
    on_nodes = core.list_event_for_all_namespaces(
        field_selector="involvedObject.kind=Node,reason=OOMKilling"
    ).items
    assert any(pod in e.message for e in on_nodes)


def test_an_image_that_cannot_be_pulled_keeps_the_pod_pending(
    batch: client.BatchV1Api, core: client.CoreV1Api, ctl: FakeControl, registry_image: str
) -> None:
    name = unique("pull")
    ctl.add_faults({"kind": "image_pull", "match": registry_image})
    batch.create_namespaced_job(NS, job_body(name, registry_image, "ok"))
    pod = one_pod(core, name).metadata.name

    def waiting_reason() -> str | None:
        statuses = core.read_namespaced_pod(pod, NS).status.container_statuses or []
        waiting = statuses[0].state.waiting if statuses else None
        return waiting.reason if waiting else None

    wait_for(lambda: waiting_reason() == "ImagePullBackOff", 15, "ImagePullBackOff")
    reasons = [(r, m) for _, r, m in events(core, pod)]
    assert ("Failed", "Error: ErrImagePull") in reasons
    assert ("Failed", "Error: ImagePullBackOff") in reasons
    assert ("BackOff", f'Back-off pulling image "{registry_image}"') in reasons
    pulled = next(m for r, m in reasons if r == "Failed" and m.startswith("Failed to pull"))
    assert f'"{registry_image}"' in pulled
    with pytest.raises(ApiException) as early:
        pod_log(core, pod)
    waiting = f'container "main" in pod "{pod}" is waiting to start: '
    assert status_of(early.value)["message"] in (  # the kubelet goes back and forth
        waiting + "trying and failing to pull image",  # ImagePullBackOff
        waiting + "image can't be pulled",  # ErrImagePull, at each new try
    )
    job = batch.read_namespaced_job_status(name, NS)
    assert "Failed" not in conditions(job) and job.status.active == 1  # it waits, as on a cluster
    assert core.read_namespaced_pod(pod, NS).status.phase == "Pending"

    ctl.clear_faults()  # the next pull works
    assert conditions(finished(batch, name))["Complete"][0] == "True"

    missing = unique("missing")
    image = "127.0.0.1:5000/stepop-missing/nothing:1"
    batch.create_namespaced_job(NS, job_body(missing, image, "ok"))
    absent = one_pod(core, missing)

    def pull_error() -> str | None:
        statuses = core.read_namespaced_pod(absent.metadata.name, NS).status.container_statuses
        waiting = statuses[0].state.waiting if statuses else None
        return waiting.message if waiting and waiting.reason == "ErrImagePull" else None

    assert f'failed to pull and unpack image "{image}"' in wait_for(pull_error, 30, "the pull")
    delete_job(batch, missing)


# --- container mode -----------------------------------------------------------------------------
@pytest.mark.container
def test_a_pod_labelled_for_container_mode_runs_in_a_container(
    batch: client.BatchV1Api,
    core: client.CoreV1Api,
    ctl: FakeControl,
    docker_engine: Any,
    registry_image: str,
) -> None:
    name = unique("box")
    body = job_body(
        name, registry_image, "env", "HOSTNAME", pod_labels={"stepop_fake_mode": "container"}
    )
    batch.create_namespaced_job(NS, body)
    assert conditions(finished(batch, name, timeout=120))["Complete"][0] == "True"
    pod = job_pods(core, name)[0].metadata.name
    assert ran(ctl, pod)["mode"] == "container"
    assert pod_log(core, pod).splitlines()[1] == f"HOSTNAME={pod}"


@pytest.fixture(autouse=True, scope="module")
def _restore_cluster(ctl: FakeControl) -> Iterator[None]:
    """The default nodes and queues after this module, whatever a test left."""
    yield
    ctl.call("DELETE", "nodes")
    ctl.call("DELETE", "queues")
