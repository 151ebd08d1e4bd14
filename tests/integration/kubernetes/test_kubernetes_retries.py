"""A Kubernetes step's Jobs when the worker, the triggerer or the API fails: the faults of the
Kubernetes rows of bench/fault_matrix.py, through dag.test() (a retry, a run triggered again
under its run_id) or a trigger stopped and resumed. Each test counts the Jobs on a cluster of
this module's own (``private_cluster``): one Job per task instance, a result reused rather than
paid again, a Job deleted when no try will come back for it."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_stepop.artifacts.storage import worker_storage
from cloud.control import FakeControl
from tests.integration.fault_steps import two_phases
from tests.integration.faults import trigger_for
from tests.integration.kubernetes.conftest import jobs_of, xcoms
from tests.integration.kubernetes.private_cluster import cluster, private_cluster  # noqa: F401
from tests.waiting import wait_for

CREATE = "createBatchV1NamespacedJob"
BASE = "127.0.0.1:5000/stepop-base/python:3.11-bookworm"


def fault_dags() -> Any:
    """The DAG file, imported afresh so module-level values see this test's env."""
    sys.modules.pop("kubernetes_fault_dags", None)
    return importlib.import_module("kubernetes_fault_dags")


def failure(results: Path) -> str:
    """What the DAG's on_failure_callback wrote: the exception's type and message."""
    return (results / "failure.txt").read_text()


def pods_of(ctl: FakeControl, job: str) -> list[dict[str, Any]]:
    """What the fake's kubelet started for the Job ``job`` (its ``ran`` records)."""
    return [pod for pod in ctl.call("GET", "ran")["ran"] if pod["job"] == job]


def test_a_retry_reattaches_to_the_running_job_with_one_create(cluster, monkeypatch):  # noqa: F811
    from kubernetes import client

    listed: list[str] = []  # the workers' Lists of Jobs (the triggers use kubernetes_asyncio)
    list_jobs = client.BatchV1Api.list_namespaced_job

    def recorded(api: Any, namespace: str, **kwargs: Any) -> Any:
        listed.append(kwargs.get("label_selector", ""))
        return list_jobs(api, namespace, **kwargs)

    monkeypatch.setattr(client.BatchV1Api, "list_namespaced_job", recorded)
    run = fault_dags().k8s_retry_reattaches().test()
    assert run.state == "success"
    assert xcoms(run)[("held", "return_value", -1)] == "done by the first job"
    assert cluster["ctl"].counters()[CREATE] == 1  # try 2 re-attached instead of submitting
    (job,) = jobs_of(run)
    assert len(pods_of(cluster["ctl"], job["metadata"]["name"])) == 1  # its one pod ran the step
    # try 2 found try 1's Job in the task state store: no List of its task's Jobs
    assert listed == []


def test_a_retry_after_the_job_succeeded_returns_its_result_with_one_create(cluster):  # noqa: F811
    run = fault_dags().k8s_retry_after_success().test()
    assert run.state == "success"
    assert xcoms(run)[("paid_once", "return_value", -1)] == "computed once"
    assert cluster["ctl"].counters()[CREATE] == 1  # try 2 reused try 1's verified result
    (job,) = jobs_of(run)
    assert [c["type"] for c in job["status"]["conditions"] if c["status"] == "True"] == [
        "SuccessCriteriaMet", "Complete",
    ]  # fmt: skip
    assert len(pods_of(cluster["ctl"], job["metadata"]["name"])) == 1


def test_a_failure_after_submit_with_no_retry_left_deletes_the_job(cluster):  # noqa: F811
    run = fault_dags().k8s_failure_after_submit().test()
    assert run.state == "failed"
    assert failure(cluster["results"]) == "RuntimeError: simulated: failure after submit"
    counters = cluster["ctl"].counters()
    assert counters[CREATE] == 1
    # the worker deleted it: no retry would come back for it
    assert counters["deleteBatchV1NamespacedJob"] == 1
    wait_for(lambda: jobs_of(run) == [], 60, "the orphaned Job to be deleted, pods and all")


def test_the_execution_timeout_deletes_the_job_and_relays_its_last_lines(cluster):  # noqa: F811
    # The 8 s count from execute(), before the Job exists: the clients' first imports in this
    # process must not be among them, or the timeout comes before there is a Job to delete.
    import kubernetes.client  # noqa: F401
    import kubernetes_asyncio.client  # noqa: F401

    run = fault_dags().k8s_times_out().test()
    assert run.state == "failed"
    said = failure(cluster["results"])
    assert said.startswith("AirflowTaskTimeout")
    assert "sleeper saved its work" in said  # printed while its pod was stopping
    counters = cluster["ctl"].counters()
    assert counters[CREATE] == 1 and counters["deleteBatchV1NamespacedJob"] == 1
    wait_for(lambda: jobs_of(run) == [], 60, "the Job to be deleted, pods and all")


def test_a_run_deleted_and_triggered_again_with_the_same_run_id_makes_new_jobs(cluster):  # noqa: F811
    """dag.test() of a logical date that has a run deletes that run first: the run triggered
    again under its run_id gets the new conf's result from a Job of its own try, and the
    cluster holds two Jobs of two names, each carrying its run's Airflow try id."""
    module = fault_dags()
    logical_date = datetime(2026, 11, 1, tzinfo=UTC)
    first = module.k8s_recreated_run().test(
        run_after=logical_date, logical_date=logical_date, run_conf={"value": 1}
    )
    assert first.state == "success"
    first_try = try_id(first)
    assert xcoms(first)[("compute", "return_value", -1)]["try_id"] == first_try

    second = module.k8s_recreated_run().test(
        run_after=logical_date, logical_date=logical_date, run_conf={"value": 2}
    )
    assert second.state == "success" and second.run_id == first.run_id
    second_try = try_id(second)
    assert second_try != first_try
    result = xcoms(second)[("compute", "return_value", -1)]
    assert result == {"value": 2, "squared": 4, "run_id": second.run_id, "try_id": second_try}
    jobs = jobs_of(second)  # the two runs' (one run_id)
    assert sorted(container_env(job)["STEPOP_TRY_ID"] for job in jobs) == sorted(
        [first_try, second_try]
    )
    assert cluster["ctl"].counters()[CREATE] == 2
    # each run staged into a run directory of its own, both still holding their files
    run_uris = {job["metadata"]["annotations"]["stepop.io/run-uri"] for job in jobs}
    assert len(run_uris) == 2, run_uris
    for uri in run_uris:
        assert {"spec.json", "output/result.json"} <= files_under(cluster["s3"], uri), uri


def test_a_trigger_resumed_by_another_triggerer_continues_the_relay_where_it_stopped(
    cluster,  # noqa: F811
    capfd,
):
    from airflow_stepop.triggers.step_job import StepJobTrigger

    release = cluster["results"] / "release"
    backend, handle = submit(cluster["root"], two_phases, [str(release)])
    job = handle["job_id"]
    first = trigger_for(backend, handle, storage_conn_id="aws_default")
    saved = f"{handle['run_uri'].rstrip('/')}/relay-{job}.json"

    def saved_cursor() -> dict[str, Any] | None:  # once it is past the pod's "before 2" line
        try:
            cursor = json.loads(worker_storage("aws_default").read_bytes(saved))["cursor"]
        except FileNotFoundError:
            return None
        stamp = stamp_of(job, "before 2")
        seen = [pod.get("time", "") for pod in cursor["pods"].values()]
        return cursor if stamp and any(time >= stamp for time in seen) else None

    async def relay_until_saved() -> None:
        task = asyncio.ensure_future(anext(aiter(first.run())))
        await asyncio.to_thread(wait_for, saved_cursor, 90, "a saved cursor", interval=0.2)
        assert not task.done()  # the Job still waits for its release
        task.cancel()  # the triggerer dies
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(relay_until_saved())
    assert f"[{job}] before 2" in capfd.readouterr().out  # the first triggerer relayed them
    release.touch()
    resumed = StepJobTrigger(**first.serialize()[1])  # what another triggerer rebuilds
    event = asyncio.run(anext(aiter(resumed.run())))
    assert event.payload["status"] == "succeeded", event.payload
    logged = capfd.readouterr().out
    assert all(logged.count(f"[{job}] after {i}") == 1 for i in range(3)), logged
    assert f"[{job}] before" not in logged  # not relayed twice
    assert cluster["ctl"].counters()[CREATE] == 1  # resuming never submits


def test_throttling_on_a_fifth_of_the_calls_still_succeeds(cluster):  # noqa: F811
    cluster["ctl"].add_faults({"kind": "throttle", "operation": "*", "rate": 0.2})
    run = fault_dags().k8s_chain().test()
    assert run.state == "success"
    assert xcoms(run)[("total", "return_value", -1)] == 50_000.0
    # the fake's rates are deterministic: every fifth call was answered 429, three at least
    assert sum(cluster["ctl"].counters().values()) >= 15
    cluster["ctl"].clear_faults()  # the test's own List below is not the step's to retry
    assert len(jobs_of(run)) == 2  # asked again, never doubled


@pytest.mark.parametrize("create", [CREATE, "createCoreV1NamespacedSecret"])
def test_a_create_the_api_server_throttles_is_asked_again_after_its_retry_after(
    cluster,  # noqa: F811
    create,
):
    """An API server under load (API Priority and Fairness) answers any request 429
    TooManyRequests with a Retry-After, a create too: it made nothing, so client-go asks again
    after the wait, whatever the verb. A step's Job and Secret creates are asked again: one
    Job, the step's result."""
    cluster["ctl"].add_faults({"kind": "throttle", "operation": create, "count": 1})
    run = fault_dags().k8s_not_deferred().test()
    assert run.state == "success"
    assert xcoms(run)[("blocking", "return_value", -1)] == 144
    assert cluster["ctl"].counters()[create] == 2  # the throttled one, then the one that made it
    assert len(jobs_of(run)) == 1


def test_a_run_of_5xx_answers_longer_than_the_client_retries_is_waited_out(cluster, capfd):  # noqa: F811
    # Three 503s in a row to the Lists of Jobs (the asyncio client retries none): the trigger
    # judges the error transient and backs off instead of failing the task.
    cluster["ctl"].add_faults(
        {"kind": "error", "status": 503, "operation": "listBatchV1NamespacedJob", "count": 3}
    )
    run = fault_dags().k8s_not_deferred().test()
    assert run.state == "success"
    assert xcoms(run)[("blocking", "return_value", -1)] == 144
    counters = cluster["ctl"].counters()
    assert counters["listBatchV1NamespacedJob"] >= 4 and counters[CREATE] == 1
    out, err = capfd.readouterr()
    assert "HTTP 503" in out + err and "retrying in" in out + err  # the trigger's backoff


def submit(root: str, function: Any, args: list[Any]) -> tuple[Any, dict[str, Any]]:
    """Stage ``function(*args)`` under the artifact root ``root`` and start its Job straight
    through the backend (no DAG): (backend, handle)."""
    from airflow_stepop.backends.base import JobRequest
    from airflow_stepop.backends.kubernetes.backend import KubernetesBackend
    from airflow_stepop.backends.kubernetes.config import KubernetesJobConfig
    from airflow_stepop.backends.naming import job_name, task_key
    from airflow_stepop.packaging.staging import StepIdentity, stage_step

    config = KubernetesJobConfig.from_arguments(
        "test", image_uri=BASE, docker=None, resources=None, artifact_root=None
    ).completed("test", artifact_root=root, connection_namespace="default",
                image_uri=BASE)  # fmt: skip
    backend = KubernetesBackend(job=config, storage_conn_id="aws_default")
    run_id = f"run-{uuid.uuid4().hex[:6]}"
    key = task_key("k8s_direct", run_id, function.__name__, -1)
    step = StepIdentity("k8s_direct", run_id, function.__name__, -1, 1)
    staged = stage_step(function, list(args), {}, root=root, step=step,
                        storage=worker_storage("aws_default"))  # fmt: skip
    request = JobRequest(job_name(key, 1), key, staged.spec_uri, staged.run_uri,
                         staged.code_uri, try_id=f"try-{run_id}")  # fmt: skip
    return backend, backend.submit(request)


def stamp_of(job: str, text: str) -> str | None:
    """The kubelet's stamp of the Job's first log line ``text``, read with the official client;
    None while its pod has not printed it."""
    from kubernetes import client

    from airflow_stepop.backends.kubernetes.clients import read_access, sync_client

    core = client.CoreV1Api(sync_client(read_access("kubernetes_default")))
    for pod in core.list_namespaced_pod("default", label_selector=f"job-name={job}").items:
        if pod.status.phase == "Pending":  # no log yet: the API answers 400
            continue
        # raw: this client version answers a log as the text of its bytes ("b'...'")
        log = core.read_namespaced_pod_log(pod.metadata.name, "default", container="step",
                                           timestamps=True, _preload_content=False)  # fmt: skip
        for line in log.data.decode().splitlines():
            stamp, _, said = line.partition(" ")
            if said == text:
                return stamp
    return None


def try_id(run: Any) -> str:
    """The Airflow task instance id of the run's one task (its try id)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        (ti,) = session.query(TaskInstance).filter_by(dag_id=run.dag_id, run_id=run.run_id)
        return str(ti.id)


def container_env(job: dict[str, Any]) -> dict[str, str]:
    container = job["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


def files_under(s3: Any, uri: str) -> set[str]:
    """The paths of the objects under the ``s3://`` directory ``uri``, relative to it."""
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    prefix = prefix.rstrip("/") + "/"
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {o["Key"].removeprefix(prefix) for page in pages for o in page.get("Contents", [])}
