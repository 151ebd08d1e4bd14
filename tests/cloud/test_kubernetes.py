"""Self-tests of the Kubernetes fake through the official clients and the cncf provider's hooks
only (no product code): the API surface, errors as the clients parse them, watches and logs.

Pods run tests/cloud/kubernetes_pod.py from a hostPath volume, in the base image of the local
registry (process mode). The cluster's behaviour (scheduling, Kueue, deletion, faults) is in
test_kubernetes_cluster.py, which shares this module's fixtures and helpers.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from cloud.control import FakeControl
from tests.waiting import wait_for

TESTS_DIR = Path(__file__).parent
NS = "stepop"


# --- fixtures and helpers (test_kubernetes_cluster.py imports them) ------------------------------
@pytest.fixture(scope="module")
def kube(cloud_stack: dict[str, str]) -> dict[str, str]:
    """The fake's endpoint and the stack's kubeconfig file."""
    if "STEPOP_KUBERNETES_ENDPOINT" not in cloud_stack:
        pytest.skip("the stack runs no Kubernetes fake")
    return cloud_stack


@pytest.fixture(scope="module")
def api(kube: dict[str, str]) -> Iterator[client.ApiClient]:
    """A sync ApiClient from the stack's kubeconfig (its own Configuration, not the global)."""
    with config.new_client_from_config(config_file=kube["STEPOP_KUBECONFIG"]) as api_client:
        yield api_client


@pytest.fixture(scope="module")
def batch(api: client.ApiClient) -> client.BatchV1Api:
    return client.BatchV1Api(api)


@pytest.fixture(scope="module")
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture(scope="module")
def ctl(kube: dict[str, str]) -> FakeControl:
    return FakeControl(kube["STEPOP_KUBERNETES_ENDPOINT"])


@pytest.fixture(autouse=True)
def _clean_faults(ctl: FakeControl) -> Iterator[None]:
    """No fault rules and zero counters around every test."""
    ctl.reset()
    yield
    ctl.reset()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def job_body(
    name: str,
    image: str,
    action: str,
    *args: str,
    labels: dict[str, str] | None = None,
    pod_labels: dict[str, str] | None = None,
    resources: dict[str, Any] | None = None,
    env: list[dict[str, Any]] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    mounts: list[dict[str, Any]] | None = None,
    pod_spec: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Job (``backoffLimit: 0``) whose pod runs ``kubernetes_pod.py <action> <args>``."""
    container = {
        "name": "main",
        "image": image,
        "command": ["python3", "/stepop-tests/kubernetes_pod.py", action, *args],
        "env": env or [],
        "resources": resources or {},
        "volumeMounts": [
            {"name": "tests", "mountPath": "/stepop-tests", "readOnly": True},
            *(mounts or []),
        ],
    }
    tests_volume = {"name": "tests", "hostPath": {"path": str(TESTS_DIR), "type": "Directory"}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels or {"suite": "kubernetes-fake"}},
        "spec": {
            "backoffLimit": 0,
            **spec,
            "template": {
                "metadata": {"labels": pod_labels or {}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [container],
                    "volumes": [tests_volume, *(volumes or [])],
                    **(pod_spec or {}),
                },
            },
        },
    }


def conditions(job: Any) -> dict[str, tuple[str, str | None]]:
    """type -> (status, reason) of a V1Job's conditions."""
    return {c.type: (c.status, c.reason) for c in job.status.conditions or []}


def finished(batch: client.BatchV1Api, name: str, ns: str = NS, timeout: float = 30) -> Any:
    """The Job once it has a Complete or Failed condition that is "True"."""

    def done() -> Any:
        job = batch.read_namespaced_job_status(name, ns)
        state = conditions(job)
        return (
            job
            if "True" in (state.get("Complete", ("",))[0], state.get("Failed", ("",))[0])
            else None
        )

    return wait_for(done, timeout, f"job {name} to finish")


def job_pods(core: client.CoreV1Api, job: str, ns: str = NS) -> list[Any]:
    return core.list_namespaced_pod(ns, label_selector=f"batch.kubernetes.io/job-name={job}").items


def one_pod(core: client.CoreV1Api, job: str, ns: str = NS) -> Any:
    return wait_for(lambda: (job_pods(core, job, ns) or [None])[0], 10, f"a pod of {job}")


def pod_log(core: client.CoreV1Api, pod: str, ns: str = NS, **options: Any) -> str:
    """The pod's log as text (the 36.x sync client returns ``str(bytes)`` unless raw)."""
    answer = core.read_namespaced_pod_log(pod, ns, _preload_content=False, **options)
    return answer.data.decode()


def events(core: client.CoreV1Api, name: str, ns: str = NS) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the events about the object ``name``."""
    found = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    return [(e.type, e.reason, e.message) for e in found]


def status_of(err: ApiException) -> dict[str, Any]:
    """The Status body of a refusal."""
    return json.loads(err.body)


def running_pod(core: client.CoreV1Api, job: str, ns: str = NS) -> Any:
    """The Job's pod once its log says it is sleeping (the ``sleep`` action)."""
    pod = one_pod(core, job, ns)
    wait_for(
        lambda: "sleeping" in pod_log(core, pod.metadata.name, ns),
        20,
        f"{pod.metadata.name} to sleep",
        tolerate=(ApiException,),
    )
    return pod


# --- the life of a Job --------------------------------------------------------------------------
def test_a_job_runs_to_completion_with_the_api_defaults(
    batch: client.BatchV1Api, core: client.CoreV1Api, registry_image: str
) -> None:
    name = unique("ok")
    created = batch.create_namespaced_job(NS, job_body(name, registry_image, "ok"))
    uid = created.metadata.uid
    assert created.metadata.generation == 1 and int(created.metadata.resource_version) > 0
    assert created.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": uid}
    assert (created.spec.completions, created.spec.parallelism) == (1, 1)
    assert (created.spec.completion_mode, created.spec.suspend) == ("NonIndexed", False)
    template_labels = created.spec.template.metadata.labels
    assert template_labels["batch.kubernetes.io/job-name"] == template_labels["job-name"] == name
    assert template_labels["controller-uid"] == uid
    assert created.spec.template.spec.containers[0].termination_message_policy == "File"

    job = finished(batch, name)
    assert conditions(job) == {
        "SuccessCriteriaMet": ("True", "CompletionsReached"),
        "Complete": ("True", "CompletionsReached"),
    }
    assert job.status.succeeded == 1 and not job.status.failed and not job.status.active
    assert job.status.start_time <= job.status.completion_time

    (pod,) = job_pods(core, name)
    assert pod.metadata.owner_references[0].uid == uid
    assert pod.metadata.labels["batch.kubernetes.io/controller-uid"] == uid
    assert pod.spec.node_name == "cpu-node-1"
    assert pod.status.phase == "Succeeded" and pod.status.start_time is not None
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (0, "Completed")
    assert terminated.started_at <= terminated.finished_at
    assert sorted(pod_log(core, pod.metadata.name).splitlines()) == [  # two pipes: any order
        f"host={pod.metadata.name} action=ok",
        "to stderr",
    ]
    reasons = [r for _, r, _ in events(core, pod.metadata.name)]
    assert reasons[:4] == ["Scheduled", "Pulled", "Created", "Started"]
    assert [(t, r) for t, r, _ in events(core, name)] == [
        ("Normal", "SuccessfulCreate"),
        ("Normal", "Completed"),
    ]


def test_a_failed_pod_fails_the_job_at_backoff_limit_zero(
    batch: client.BatchV1Api, core: client.CoreV1Api, registry_image: str
) -> None:
    name = unique("fail")
    batch.create_namespaced_job(NS, job_body(name, registry_image, "fail"))
    job = finished(batch, name)
    assert conditions(job) == {
        "FailureTarget": ("True", "BackoffLimitExceeded"),
        "Failed": ("True", "BackoffLimitExceeded"),
    }
    failed = next(c for c in job.status.conditions if c.type == "Failed")
    assert failed.message == "Job has reached the specified backoff limit"
    assert job.status.failed == 1 and job.status.completion_time is None
    (pod,) = job_pods(core, name)
    terminated = pod.status.container_statuses[0].state.terminated
    assert (pod.status.phase, terminated.exit_code, terminated.reason) == ("Failed", 3, "Error")
    assert ("Warning", "BackoffLimitExceeded", failed.message) in events(core, name)


def test_a_suspended_job_has_no_pods_until_resumed_by_a_patch(
    batch: client.BatchV1Api, core: client.CoreV1Api, registry_image: str
) -> None:
    name = unique("suspend")
    batch.create_namespaced_job(NS, job_body(name, registry_image, "ok", suspend=True))
    suspended = wait_for(
        lambda: (j := batch.read_namespaced_job(name, NS)).status.conditions and j,
        10,
        "the Suspended condition",
    )
    assert conditions(suspended) == {"Suspended": ("True", "JobSuspended")}
    assert suspended.status.start_time is None and job_pods(core, name) == []

    patched = batch.patch_namespaced_job(
        name,
        NS,
        {"spec": {"suspend": False}, "metadata": {"labels": {"resumed": "yes"}}},
        _content_type="application/merge-patch+json",
    )
    assert patched.spec.suspend is False and patched.metadata.generation == 2
    assert patched.metadata.labels["resumed"] == "yes"
    job = finished(batch, name)
    assert conditions(job)["Suspended"] == ("False", "JobResumed")
    assert job.status.start_time is not None and job.status.succeeded == 1
    assert [r for _, r, _ in events(core, name)][:3] == ["Suspended", "Resumed", "SuccessfulCreate"]


def test_strategic_and_json_patches(batch: client.BatchV1Api, registry_image: str) -> None:
    name = unique("patch")
    batch.create_namespaced_job(NS, job_body(name, registry_image, "ok", suspend=True))
    smp = batch.patch_namespaced_job(name, NS, {"metadata": {"annotations": {"a": "1"}}})
    assert smp.metadata.annotations == {"a": "1"}
    ops = [
        {"op": "add", "path": "/metadata/labels/extra", "value": "x"},
        {"op": "remove", "path": "/metadata/annotations/a"},
    ]
    patched = batch.patch_namespaced_job(name, NS, ops)
    assert patched.metadata.labels["extra"] == "x" and not patched.metadata.annotations
    with pytest.raises(ApiException) as err:
        batch.patch_namespaced_job(name, NS, {"spec": {"completionMode": "Indexed"}})
    assert err.value.status == 422 and "field is immutable" in status_of(err.value)["message"]


# --- lists, selectors, watches ------------------------------------------------------------------
def test_lists_by_label_and_field_selector_with_pages(
    batch: client.BatchV1Api, ctl: FakeControl, registry_image: str
) -> None:
    run = uuid.uuid4().hex[:8]
    names = [f"sel-{run}-{i}" for i in range(3)]
    tiers = ["gold", "silver", "bronze"]
    for name, tier in zip(names, tiers, strict=True):
        labels = {"run": run, "tier": tier, **({"gpu": "yes"} if tier == "gold" else {})}
        batch.create_namespaced_job(
            NS, job_body(name, registry_image, "ok", labels=labels, suspend=True)
        )

    def listed(selector: str, **options: Any) -> list[str]:
        found = batch.list_namespaced_job(NS, label_selector=f"run={run},{selector}", **options)
        return [j.metadata.name for j in found.items]

    assert listed("tier=gold") == listed("tier==gold") == names[:1]
    assert listed("tier!=gold") == names[1:]
    assert listed("tier in (gold,bronze)") == [names[0], names[2]]
    assert listed("tier notin (gold,bronze)") == [names[1]]
    assert listed("gpu") == names[:1] and listed("!gpu") == names[1:]
    assert listed("tier", field_selector=f"metadata.name={names[1]}") == [names[1]]
    everywhere = batch.list_job_for_all_namespaces(label_selector=f"run={run}")
    assert [j.metadata.namespace for j in everywhere.items] == [NS] * 3

    page = batch.list_namespaced_job(NS, label_selector=f"run={run}", limit=2)
    assert [j.metadata.name for j in page.items] == names[:2]
    assert page.metadata.remaining_item_count == 1
    rest = batch.list_namespaced_job(
        NS, label_selector=f"run={run}", limit=2, _continue=page.metadata._continue
    )
    assert [j.metadata.name for j in rest.items] == names[2:] and not rest.metadata._continue

    with pytest.raises(ApiException) as bad:
        batch.list_namespaced_job(NS, label_selector="tier in gold")
    assert bad.value.status == 400
    with pytest.raises(ApiException) as field:
        batch.list_namespaced_job(NS, field_selector="spec.parallelism=1")
    assert status_of(field.value)["message"] == "field label not supported: spec.parallelism"
    batch.patch_namespaced_job(names[0], NS, {"metadata": {"labels": {"seen": "yes"}}})
    ctl.call("POST", "compact")  # the page's version is now older than the history kept
    with pytest.raises(ApiException) as expired:
        batch.list_namespaced_job(
            NS, label_selector=f"run={run}", limit=2, _continue=page.metadata._continue
        )
    assert (expired.value.status, status_of(expired.value)["reason"]) == (410, "Expired")


def test_watch_sees_a_job_through_to_completion(
    batch: client.BatchV1Api, registry_image: str
) -> None:
    name = unique("watched")
    rv = batch.list_namespaced_job(NS, limit=1).metadata.resource_version
    batch.create_namespaced_job(NS, job_body(name, registry_image, "ok"))
    seen = []
    stream = watch.Watch().stream(
        batch.list_namespaced_job,
        NS,
        resource_version=rv,
        field_selector=f"metadata.name={name}",
        timeout_seconds=30,
        allow_watch_bookmarks=True,
    )
    for event in stream:
        if event["type"] == "BOOKMARK":
            continue
        job = event["object"]
        seen.append((event["type"], int(job.metadata.resource_version)))
        if "Complete" in conditions(job):
            break
    assert seen[0][0] == "ADDED" and {t for t, _ in seen[1:]} == {"MODIFIED"}
    versions = [v for _, v in seen]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)


def test_watch_bookmarks_and_a_too_old_version(batch: client.BatchV1Api, ctl: FakeControl) -> None:
    rv = batch.list_namespaced_job(NS, limit=1).metadata.resource_version
    events_ = list(
        watch.Watch().stream(
            batch.list_namespaced_job,
            NS,
            resource_version=rv,
            label_selector="nothing=matches",
            timeout_seconds=1,
            allow_watch_bookmarks=True,
        )
    )
    assert [e["type"] for e in events_] == ["BOOKMARK"]
    assert int(events_[0]["raw_object"]["metadata"]["resourceVersion"]) >= int(rv)

    ctl.call("POST", "compact")
    with pytest.raises(ApiException) as err:
        list(
            watch.Watch().stream(
                batch.list_namespaced_job, NS, resource_version="1", timeout_seconds=5
            )
        )
    assert err.value.status == 410 and err.value.reason.startswith("Expired: too old resource")


# --- logs ---------------------------------------------------------------------------------------
def test_logs_with_timestamps_since_time_tail_and_limit(
    api: client.ApiClient, batch: client.BatchV1Api, core: client.CoreV1Api, registry_image: str
) -> None:
    name = unique("logs")
    batch.create_namespaced_job(NS, job_body(name, registry_image, "two-seconds"))
    finished(batch, name)
    pod = one_pod(core, name).metadata.name
    lines = pod_log(core, pod, timestamps=True).splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == [
        f"host={pod} action=two-seconds",
        "first",
        "second",
    ]
    stamp = lines[2].split(" ", 1)[0]
    assert len(stamp) == 30 and stamp.endswith("Z") and stamp[19] == "."  # nanoseconds

    def since(moment: str) -> list[str]:
        answer = api.call_api(
            "/api/v1/namespaces/{namespace}/pods/{name}/log",
            "GET",
            path_params={"namespace": NS, "name": pod},
            query_params=[("sinceTime", moment)],
            auth_settings=["BearerToken"],
            _preload_content=False,
            response_types_map={},
        )
        return answer.data.decode().splitlines()

    assert since(stamp[:19] + "Z") == ["second"]  # inclusive, to the second
    assert since(stamp) == ["second"]  # the fraction is dropped, as a metav1.Time's is
    assert pod_log(core, pod, tail_lines=1) == "second\n"
    assert pod_log(core, pod, limit_bytes=7) == f"host={pod}"[:7]
    assert pod_log(core, pod, since_seconds=3600).splitlines()[1:] == ["first", "second"]


def test_follow_streams_until_the_container_ends(
    batch: client.BatchV1Api, core: client.CoreV1Api, registry_image: str
) -> None:
    name = unique("follow")
    batch.create_namespaced_job(NS, job_body(name, registry_image, "ticks"))
    pod = one_pod(core, name).metadata.name
    wait_for(lambda: pod_log(core, pod), 20, "the first line", tolerate=(ApiException,))
    followed = list(watch.Watch().stream(core.read_namespaced_pod_log, pod, NS))
    assert followed == [f"host={pod} action=ticks", "tick 0", "tick 1", "tick 2"]
    assert core.read_namespaced_pod(pod, NS).status.phase == "Succeeded"


# --- errors as the clients parse them -----------------------------------------------------------
def test_refusals_are_status_objects(
    kube: dict[str, str], batch: client.BatchV1Api, core: client.CoreV1Api, registry_image: str
) -> None:
    name = unique("dup")
    batch.create_namespaced_job(NS, job_body(name, registry_image, "ok", suspend=True))
    with pytest.raises(ApiException) as dup:
        batch.create_namespaced_job(NS, job_body(name, registry_image, "ok"))
    assert (dup.value.status, dup.value.reason) == (409, "Conflict")
    assert status_of(dup.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'jobs.batch "{name}" already exists',
        "reason": "AlreadyExists",
        "details": {"name": name, "group": "batch", "kind": "jobs"},
        "code": 409,
    }

    with pytest.raises(ApiException) as missing:
        batch.read_namespaced_job_status("no-such-job", NS)
    assert status_of(missing.value)["message"] == 'jobs.batch "no-such-job" not found'
    with pytest.raises(ApiException) as pod_missing:
        core.read_namespaced_pod("no-such-pod", NS)
    assert status_of(pod_missing.value)["details"] == {"name": "no-such-pod", "kind": "pods"}
    with pytest.raises(ApiException) as no_ns:
        batch.create_namespaced_job("no-such-ns", job_body(unique("x"), registry_image, "ok"))
    assert no_ns.value.status == 404
    assert status_of(no_ns.value)["message"] == 'namespaces "no-such-ns" not found'

    with pytest.raises(ApiException) as bad_name:
        batch.create_namespaced_job(NS, job_body("Bad_Name", registry_image, "ok"))
    body = status_of(bad_name.value)
    assert (bad_name.value.status, body["reason"], body["details"]["kind"]) == (
        422,
        "Invalid",
        "Job",
    )
    assert body["message"].startswith('Job.batch "Bad_Name" is invalid: metadata.name: Invalid')
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    assert "lowercase RFC 1123 subdomain" in body["details"]["causes"][0]["message"]

    with pytest.raises(ApiException) as bad_label:
        batch.create_namespaced_job(
            NS, job_body(unique("x"), registry_image, "ok", labels={"tier": "not ok!"})
        )
    (cause,) = status_of(bad_label.value)["details"]["causes"]
    assert cause["field"] == "metadata.labels" and cause["reason"] == "FieldValueInvalid"

    negative = {"requests": {"cpu": "-1"}}
    with pytest.raises(ApiException) as bad_amount:
        batch.create_namespaced_job(
            NS, job_body(unique("x"), registry_image, "ok", resources=negative)
        )
    (cause,) = status_of(bad_amount.value)["details"]["causes"]
    assert cause["field"] == "spec.template.spec.containers[0].resources.requests[cpu]"
    with pytest.raises(ApiException) as malformed:
        batch.create_namespaced_job(
            NS,
            job_body(unique("x"), registry_image, "ok", resources={"limits": {"memory": "lots"}}),
        )
    assert malformed.value.status == 400 and "quantities must match" in malformed.value.body

    anonymous = client.Configuration(host=kube["STEPOP_KUBERNETES_ENDPOINT"])
    with client.ApiClient(anonymous) as no_token, pytest.raises(ApiException) as unauthorized:
        client.CoreV1Api(no_token).list_namespace()
    assert (unauthorized.value.status, status_of(unauthorized.value)["reason"]) == (
        401,
        "Unauthorized",
    )


def test_throttling_and_server_errors(
    batch: client.BatchV1Api, ctl: FakeControl, registry_image: str
) -> None:
    ctl.add_faults(
        {
            "kind": "throttle",
            "operation": "createBatchV1NamespacedJob",
            "count": 1,
            "retry_after": 3,
        }
    )
    name = unique("throttled")
    with pytest.raises(ApiException) as throttled:
        batch.create_namespaced_job(NS, job_body(name, registry_image, "ok", suspend=True))
    assert (throttled.value.status, throttled.value.headers["Retry-After"]) == (429, "3")
    body = status_of(throttled.value)
    assert (body["reason"], body["details"]["retryAfterSeconds"]) == ("TooManyRequests", 3)
    batch.create_namespaced_job(NS, job_body(name, registry_image, "ok", suspend=True))

    # urllib3 (the sync client's) retries a GET answered 429 with Retry-After by itself
    ctl.add_faults({"kind": "throttle", "operation": "readBatchV1NamespacedJob", "count": 1})
    assert batch.read_namespaced_job(name, NS).metadata.name == name
    ctl.add_faults({"kind": "error", "status": 503, "count": 1})
    with pytest.raises(ApiException) as unavailable:
        batch.read_namespaced_job(name, NS)
    assert status_of(unavailable.value)["reason"] == "ServiceUnavailable"
    assert ctl.counters() == {"createBatchV1NamespacedJob": 2, "readBatchV1NamespacedJob": 3}


# --- discovery, namespaces, nodes, the stack's connection ---------------------------------------
def test_discovery_namespaces_and_nodes(api: client.ApiClient, core: client.CoreV1Api) -> None:
    assert client.VersionApi(api).get_code().minor == "31"
    groups = client.ApisApi(api).get_api_versions()
    assert [g.name for g in groups.groups] == ["batch"]
    resources = client.BatchV1Api(api).get_api_resources()
    assert "jobs/status" in [r.name for r in resources.resources]
    assert {"default", "stepop"} <= {n.metadata.name for n in core.list_namespace().items}

    name = unique("ns")
    created = core.create_namespace({"metadata": {"name": name}})
    assert created.status.phase == "Active"
    assert core.read_namespace(name).metadata.labels["kubernetes.io/metadata.name"] == name
    with pytest.raises(ApiException) as dup:
        core.create_namespace({"metadata": {"name": name}})
    assert dup.value.status == 409

    cpu, gpu = core.list_node().items
    assert (cpu.metadata.name, cpu.status.allocatable["cpu"]) == ("cpu-node-1", "8")
    assert gpu.status.allocatable["nvidia.com/gpu"] == "4"
    assert gpu.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert [(t.key, t.value, t.effect) for t in gpu.spec.taints] == [
        ("nvidia.com/gpu", "present", "NoSchedule")
    ]
    assert core.list_node(label_selector="nvidia.com/gpu.count=4").items[0].metadata.name == (
        "gpu-node-1"
    )


def test_the_stack_connection_works_with_the_cncf_hooks(
    cloud_environ: dict[str, str],
    kube: dict[str, str],
    registry_image: str,
) -> None:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import (
        AsyncKubernetesHook,
        KubernetesHook,
    )

    connection = json.loads(kube["AIRFLOW_CONN_KUBERNETES_DEFAULT"])
    assert connection["conn_type"] == "kubernetes"
    assert connection["extra"]["namespace"] == "default"
    assert (
        json.loads(Path(kube["STEPOP_KUBECONFIG"]).read_text())
        == (connection["extra"]["kube_config"])
    )
    hook = KubernetesHook(conn_id="kubernetes_default")
    assert hook.test_connection()[0] is True
    assert hook.get_namespace() == "default"
    name = unique("hook")
    hook.create_job(client.V1Job(**_job_model(job_body(name, registry_image, "ok"))))
    job = hook.wait_until_job_complete(name, "default", job_poll_interval=0.2)
    assert hook.is_job_complete(job) and hook.is_job_successful(job) is True
    pods = hook.get_namespaced_pod_list(label_selector=f"job-name={name}", namespace="default")
    pod = json.loads(pods.data)["items"][0]["metadata"]["name"]  # the hook asks for raw data
    logged = hook.get_pod_logs(pod, namespace="default").data.decode().splitlines()
    assert f"host={pod} action=ok" in logged

    async def read() -> tuple[Any, list[str], list[str]]:
        async_hook = AsyncKubernetesHook(conn_id="kubernetes_default")
        status = await async_hook.get_job_status(name, "default")
        lines = await async_hook.read_logs(pod, "default", "main")
        reasons = [e.reason for e in (await async_hook.get_pod_events(pod, "default")).items]
        return status, lines, reasons

    status, lines, reasons = asyncio.run(read())
    assert status.status.succeeded == 1
    assert any(line.endswith(f"host={pod} action=ok") for line in lines)  # timestamped lines
    assert "Started" in reasons


def _job_model(body: dict[str, Any]) -> dict[str, Any]:
    """A Job body as V1Job keyword arguments (the hook sanitizes models, not dicts)."""
    return {
        "api_version": body["apiVersion"],
        "kind": body["kind"],
        "metadata": client.V1ObjectMeta(namespace="default", **body["metadata"]),
        "spec": body["spec"],
    }


def test_the_asyncio_client_and_its_watch(kube: dict[str, str], registry_image: str) -> None:
    from kubernetes_asyncio import client as async_client
    from kubernetes_asyncio import config as async_config
    from kubernetes_asyncio import watch as async_watch

    name = unique("async")

    async def run() -> tuple[list[str], str]:
        api_client = await async_config.new_client_from_config(
            config_file=kube["STEPOP_KUBECONFIG"]
        )
        async with api_client:
            batch_api = async_client.BatchV1Api(api_client)
            await batch_api.create_namespaced_job(NS, job_body(name, registry_image, "ok"))
            types = []
            async with async_watch.Watch().stream(
                batch_api.list_namespaced_job,
                NS,
                field_selector=f"metadata.name={name}",
                timeout_seconds=30,
            ) as stream:
                async for event in stream:
                    types.append(event["type"])
                    if "Complete" in conditions(event["object"]):
                        break
            core_api = async_client.CoreV1Api(api_client)
            pods = await core_api.list_namespaced_pod(NS, label_selector=f"job-name={name}")
            log = await core_api.read_namespaced_pod_log(pods.items[0].metadata.name, NS)
            return types, log

    types, log = asyncio.run(run())
    assert types[0] == "ADDED" and set(types[1:]) == {"MODIFIED"}
    assert "to stderr" in log.splitlines()


def test_a_private_fake_resets_to_a_fresh_cluster(tmp_path: Path, registry_image: str) -> None:
    from cloud.kubernetes import stack_env, start

    server = start({"STEPOP_CLOUD_DIR": str(tmp_path)})
    try:
        written = stack_env(server.url, {"STEPOP_CLOUD_DIR": str(tmp_path)})
        assert written["STEPOP_KUBECONFIG"] == str(tmp_path / "kubeconfig")
        control = FakeControl(server.url)
        with config.new_client_from_config(config_file=written["STEPOP_KUBECONFIG"]) as own:
            own_batch, own_core = client.BatchV1Api(own), client.CoreV1Api(own)
            name = unique("reset")
            own_batch.create_namespaced_job(NS, job_body(name, registry_image, "ok"))
            finished(own_batch, name)
            own_core.create_namespace({"metadata": {"name": name}})
            assert [r["job"] for r in control.call("GET", "ran")["ran"]] == [name]
            control.reset(jobs=True)
            assert own_batch.list_job_for_all_namespaces().items == []
            assert own_core.list_pod_for_all_namespaces().items == []
            assert name not in {n.metadata.name for n in own_core.list_namespace().items}
            assert {"default", "stepop"} <= {
                n.metadata.name for n in own_core.list_namespace().items
            }
            assert control.call("DELETE", "ran") == {"ran": []}
    finally:
        server.shutdown()
