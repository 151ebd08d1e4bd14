"""Self-tests of the Vertex AI CustomJob fake, through google-cloud-aiplatform's REST client only.

Each test talks to the fake exactly as product code would (JobServiceClient, transport="rest")
and checks storage through google-cloud-storage against the gcp-storage-emulator. The fixtures
start their own emulator and fake, so these tests need nothing but the virtualenv.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from google.api_core import exceptions
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import aiplatform_v1, storage
from google.cloud.aiplatform_v1.types import JobState

from cloud import stack, vertex
from tests.waiting import free_port, wait_for

PARENT = "projects/stepop-test/locations/us-central1"
BUCKET = "vertex-selftest"
CONTEXTS = f"{PARENT}/metadataStores/default/contexts"
ACCOUNT = "trainer@stepop-test.iam.gserviceaccount.com"
TERMINAL = {
    JobState.JOB_STATE_SUCCEEDED,
    JobState.JOB_STATE_FAILED,
    JobState.JOB_STATE_CANCELLED,
}


@pytest.fixture(scope="module")
def gcs_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gcp-storage-emulator of our own (in memory), or the stack's when one is configured."""
    if os.environ.get("STORAGE_EMULATOR_HOST"):
        yield os.environ["STORAGE_EMULATOR_HOST"]
        return
    env = stack.read_env()
    if env.get("STORAGE_EMULATOR_HOST") and stack.running(env):
        yield env["STORAGE_EMULATOR_HOST"]
        return
    port = free_port()
    exe = Path(sys.executable).parent / "gcp-storage-emulator"
    log = open(tmp_path_factory.mktemp("gcs") / "emulator.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [str(exe), "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    host = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            urllib.request.urlopen(f"{host}/storage/v1/b?project=x", timeout=1).close()
            return True
        except OSError:
            return proc.poll() is not None

    wait_for(answers, 30, "gcp-storage-emulator")
    assert proc.poll() is None, "gcp-storage-emulator exited"
    yield host
    proc.terminate()
    proc.wait(timeout=10)
    log.close()


@pytest.fixture(scope="module")
def gcs(gcs_host: str) -> storage.Client:
    return storage.Client(
        project="stepop-test",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": gcs_host},
    )


@pytest.fixture(scope="module")
def bucket(gcs: storage.Client) -> storage.Bucket:
    try:
        return gcs.create_bucket(BUCKET)
    except exceptions.Conflict:
        return gcs.bucket(BUCKET)


@pytest.fixture(scope="module")
def fake(gcs_host: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    server = vertex.serve(
        "127.0.0.1", 0, gcs_emulator_host=gcs_host, tmp_base=str(tmp_path_factory.mktemp("vx"))
    )
    yield server
    server.shutdown()


@pytest.fixture(autouse=True)
def _clean_faults(fake: Any) -> Iterator[None]:
    requests.post(f"{fake.url}/_fake/reset", json={}, timeout=5)
    yield
    clear_faults(fake)


@pytest.fixture(scope="module")
def client(fake: Any) -> aiplatform_v1.JobServiceClient:
    return aiplatform_v1.JobServiceClient(
        transport="rest",
        client_options=ClientOptions(api_endpoint=fake.url),
        credentials=AnonymousCredentials(),
    )


def python_job(
    code: str,
    name: str = "selftest",
    machine: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A CustomJob running ``python3 -c code`` on one n1-standard-4."""
    return {
        "display_name": name,
        "labels": {"suite": "selftest"},
        "job_spec": {
            "worker_pool_specs": [
                {
                    "machine_spec": machine or {"machine_type": "n1-standard-4"},
                    "replica_count": 1,
                    "container_spec": {
                        "image_uri": "127.0.0.1:5000/stepop-base/python:3.11-bookworm",
                        "command": ["python3", "-c", code],
                        "env": [{"name": "GREETING", "value": "hello"}],
                    },
                }
            ],
            **spec,
        },
    }


def wait_done(client: aiplatform_v1.JobServiceClient, name: str, timeout: float = 60) -> Any:
    def done() -> Any:
        job = client.get_custom_job(name=name)
        return job if job.state in TERMINAL else None

    return wait_for(done, timeout, f"{name} to end")


def wait_state(client: aiplatform_v1.JobServiceClient, name: str, state: JobState) -> Any:
    def reached() -> Any:
        job = client.get_custom_job(name=name)
        return job if job.state == state else None

    return wait_for(reached, 60, f"{name} to reach {state.name}")


def set_fault(fake: Any, **rule: Any) -> None:
    resp = requests.post(f"{fake.url}/_fake/faults", json=rule, timeout=5)
    assert resp.status_code == 200, resp.text


def clear_faults(fake: Any) -> None:
    requests.delete(f"{fake.url}/_fake/faults", timeout=5).raise_for_status()


def counters(fake: Any) -> dict[str, int]:
    return requests.get(f"{fake.url}/_fake/counters", timeout=5).json()["counters"]


def fake_logs(fake: Any, job_name: str) -> str:
    job_id = job_name.rsplit("/", 1)[-1]
    return requests.get(f"{fake.url}/_fake/logs/{job_id}", timeout=5).text


# --- the happy path ---------------------------------------------------------------------------
OUTPUT_CODE = """
import os, sys
data = open('/gcs/vertex-selftest/inputs/data.txt').read()
model_dir = os.environ['AIP_MODEL_DIR'].replace('gs://', '/gcs/')
os.makedirs(model_dir, exist_ok=True)
open(os.path.join(model_dir, 'model.txt'), 'w').write(data.upper() + ' ' + os.environ['GREETING'])
print('trained on', len(data), 'bytes')
print('a warning', file=sys.stderr)
"""


def test_create_runs_to_success_with_output_in_gcs(
    client: aiplatform_v1.JobServiceClient, bucket: storage.Bucket, fake: Any
) -> None:
    bucket.blob("inputs/data.txt").upload_from_string("some data")
    base = f"gs://{BUCKET}/runs/ok"
    job = client.create_custom_job(
        parent=PARENT,
        custom_job=python_job(OUTPUT_CODE, base_output_directory={"output_uri_prefix": base}),
    )
    assert job.name.startswith(f"{PARENT}/customJobs/")
    assert job.state == JobState.JOB_STATE_QUEUED
    assert job.display_name == "selftest"
    assert job.labels["suite"] == "selftest"
    done = wait_done(client, job.name)
    assert done.state == JobState.JOB_STATE_SUCCEEDED, done.error
    assert done.start_time and done.end_time and done.end_time >= done.start_time
    assert bucket.blob("runs/ok/model/model.txt").download_as_text() == "SOME DATA hello"
    logs = fake_logs(fake, job.name)
    assert "trained on 9 bytes" in logs and "a warning" in logs
    # Cloud Logging's entries:list, as real Vertex logs are read
    job_id = job.name.rsplit("/", 1)[-1]
    resp = requests.post(
        f"{fake.url}/v2/entries:list",
        json={
            "resourceNames": ["projects/stepop-test"],
            "filter": f'resource.type="ml_job" AND resource.labels.job_id="{job_id}"',
        },
        timeout=5,
    ).json()
    by_text = {e["textPayload"]: e for e in resp["entries"]}
    assert by_text["trained on 9 bytes"]["severity"] == "INFO"
    assert by_text["a warning"]["severity"] == "ERROR"
    assert by_text["a warning"]["resource"]["labels"]["task_name"] == "workerpool0-0"
    got = counters(fake)
    assert got["CreateCustomJob"] == 1 and got["GetCustomJob"] >= 1


def test_state_passes_through_running(
    client: aiplatform_v1.JobServiceClient, bucket: storage.Bucket
) -> None:
    code = (
        "import os, time; open('/gcs/vertex-selftest/x', 'w').close(); "
        "time.sleep(1.5); print('bye')"
    )
    job = client.create_custom_job(parent=PARENT, custom_job=python_job(code))
    seen = wait_state(client, job.name, JobState.JOB_STATE_RUNNING)
    assert seen.start_time
    assert wait_done(client, job.name).state == JobState.JOB_STATE_SUCCEEDED
    assert bucket.blob("x").exists()


def test_cluster_spec_for_multi_replica_pools(
    client: aiplatform_v1.JobServiceClient, bucket: storage.Bucket
) -> None:
    code = """
import json, os
spec = json.loads(os.environ['CLUSTER_SPEC'])
task = spec['task']
path = '/gcs/vertex-selftest/cluster/%s-%d.json' % (task['type'], task['index'])
os.makedirs(os.path.dirname(path), exist_ok=True)
json.dump({'spec': spec, 'rank': os.environ['RANK'], 'world': os.environ['WORLD_SIZE'],
           'master': os.environ['MASTER_ADDR'] + ':' + os.environ['MASTER_PORT']}, open(path, 'w'))
"""
    body = python_job(code, name="multi")
    pool = body["job_spec"]["worker_pool_specs"][0]
    body["job_spec"]["worker_pool_specs"].append({**pool, "replica_count": 2})
    job = client.create_custom_job(parent=PARENT, custom_job=body)
    done = wait_done(client, job.name)
    assert done.state == JobState.JOB_STATE_SUCCEEDED, done.error
    seen = {}
    for name in ("workerpool0-0", "workerpool1-0", "workerpool1-1"):
        seen[name] = json.loads(bucket.blob(f"cluster/{name}.json").download_as_text())
    assert sorted(v["rank"] for v in seen.values()) == ["0", "1", "2"]
    assert {v["world"] for v in seen.values()} == {"3"}
    cluster = seen["workerpool1-1"]["spec"]["cluster"]
    assert len(cluster["workerpool0"]) == 1 and len(cluster["workerpool1"]) == 2
    assert seen["workerpool1-1"]["master"] == cluster["workerpool0"][0]
    assert seen["workerpool1-1"]["spec"]["task"] == {"type": "workerpool1", "index": 1}


def test_list_filter_and_pagination(client: aiplatform_v1.JobServiceClient) -> None:
    names = []
    for i in range(3):
        job = client.create_custom_job(
            parent=PARENT, custom_job=python_job("pass", name=f"listed-{i}")
        )
        names.append(job.name)
    for name in names:
        wait_done(client, name)
    pager = client.list_custom_jobs(
        request={"parent": PARENT, "filter": 'display_name="listed-1"', "page_size": 10}
    )
    assert [j.name for j in pager] == [names[1]]
    pager = client.list_custom_jobs(request={"parent": PARENT, "page_size": 2})
    first_page = next(iter(pager.pages))
    assert len(first_page.custom_jobs) == 2 and first_page.next_page_token
    listed = [j.name for j in client.list_custom_jobs(request={"parent": PARENT, "page_size": 2})]
    assert set(names) <= set(listed)
    assert len(listed) == len(set(listed))
    succeeded = client.list_custom_jobs(
        request={
            "parent": PARENT,
            "filter": 'state="JOB_STATE_SUCCEEDED" AND labels.suite="selftest"',
        }
    )
    assert set(names) <= {j.name for j in succeeded}


def test_list_filter_or_not_and_time(client: aiplatform_v1.JobServiceClient) -> None:
    a = client.create_custom_job(parent=PARENT, custom_job=python_job("pass", name="either-a"))
    b = client.create_custom_job(parent=PARENT, custom_job=python_job("pass", name="either-b"))
    for job in (a, b):
        wait_done(client, job.name)
    either = 'display_name="either-a" OR display_name="either-b"'
    got = {j.name for j in client.list_custom_jobs(request={"parent": PARENT, "filter": either})}
    assert got == {a.name, b.name}
    flt = f'({either}) AND NOT display_name="either-b"'
    got = {j.name for j in client.list_custom_jobs(request={"parent": PARENT, "filter": flt})}
    assert got == {a.name}
    created = client.get_custom_job(name=a.name).create_time
    since = created.strftime("%Y-%m-%dT%H:%M:%SZ")  # whole seconds, as people write them
    flt = f'create_time>="{since}" AND display_name="either-a"'
    assert [j.name for j in client.list_custom_jobs(request={"parent": PARENT, "filter": flt})] == [
        a.name
    ]


def test_delete_finished_job(client: aiplatform_v1.JobServiceClient) -> None:
    job = client.create_custom_job(parent=PARENT, custom_job=python_job("pass", name="deleted"))
    wait_done(client, job.name)
    client.delete_custom_job(name=job.name).result(timeout=10)
    with pytest.raises(exceptions.NotFound):
        client.get_custom_job(name=job.name)


def test_async_rest_client(fake: Any) -> None:
    from google.auth.aio.credentials import AnonymousCredentials as AsyncAnonymous

    async def scenario() -> tuple[Any, Any]:
        aclient = aiplatform_v1.JobServiceAsyncClient(
            transport="rest_asyncio",
            client_options=ClientOptions(api_endpoint=fake.url),
            credentials=AsyncAnonymous(),
        )
        job = await aclient.create_custom_job(parent=PARENT, custom_job=python_job("pass"))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            got = await aclient.get_custom_job(name=job.name)
            if got.state in TERMINAL:
                return job, got
            await asyncio.sleep(0.05)
        raise AssertionError("async job did not end")

    job, got = asyncio.run(scenario())
    assert got.name == job.name
    assert got.state == JobState.JOB_STATE_SUCCEEDED


# --- cancel and failures ---------------------------------------------------------------------
def test_cancel_running_job(client: aiplatform_v1.JobServiceClient, fake: Any) -> None:
    code = "import time\nprint('started', flush=True)\ntime.sleep(120)"
    job = client.create_custom_job(parent=PARENT, custom_job=python_job(code, name="cancelled"))
    wait_state(client, job.name, JobState.JOB_STATE_RUNNING)
    wait_for(lambda: "started" in fake_logs(fake, job.name), 30, "the job's first log line")
    client.cancel_custom_job(name=job.name)
    state = client.get_custom_job(name=job.name).state
    assert state in (JobState.JOB_STATE_CANCELLING, JobState.JOB_STATE_CANCELLED)
    done = wait_done(client, job.name, timeout=30)
    assert done.state == JobState.JOB_STATE_CANCELLED
    assert done.error.code == 1 and done.error.message == "CANCELED"
    with pytest.raises(exceptions.BadRequest):
        client.cancel_custom_job(name=job.name)


def test_exit_code_fails_job_with_reason(client: aiplatform_v1.JobServiceClient, fake: Any) -> None:
    code = "import sys; print('boom: bad input', file=sys.stderr); sys.exit(3)"
    job = client.create_custom_job(parent=PARENT, custom_job=python_job(code, name="failing"))
    done = wait_done(client, job.name)
    assert done.state == JobState.JOB_STATE_FAILED
    assert done.error.code == 3
    assert "The replica workerpool0-0 exited with a non-zero status of 3" in done.error.message
    assert "boom: bad input" in fake_logs(fake, job.name)


def test_unknown_job_is_not_found(client: aiplatform_v1.JobServiceClient) -> None:
    with pytest.raises(exceptions.NotFound):
        client.get_custom_job(name=f"{PARENT}/customJobs/123")


def test_scheduling_timeout_fails_job(client: aiplatform_v1.JobServiceClient) -> None:
    body = python_job("import time; time.sleep(60)", scheduling={"timeout": "1s"})
    job = client.create_custom_job(parent=PARENT, custom_job=body)
    done = wait_done(client, job.name, timeout=30)
    assert done.state == JobState.JOB_STATE_FAILED
    assert done.error.code == 4


# --- faults ----------------------------------------------------------------------------------
def test_throttling_is_resource_exhausted(
    client: aiplatform_v1.JobServiceClient, fake: Any
) -> None:
    set_fault(fake, kind="throttle", operation="CreateCustomJob", count=2)
    for _ in range(2):
        with pytest.raises(exceptions.TooManyRequests) as info:
            client.create_custom_job(parent=PARENT, custom_job=python_job("pass"))
        assert "Quota exceeded" in info.value.message
    raw = requests.post(f"{fake.url}/v1/{PARENT}/customJobs", json={}, timeout=5)
    assert raw.status_code == 400  # the rule retired after two throttled calls
    set_fault(fake, kind="throttle", operation="GetCustomJob", rate=0.5)
    results = []
    for _ in range(4):
        try:
            client.get_custom_job(name=f"{PARENT}/customJobs/1")
        except exceptions.TooManyRequests as exc:
            results.append(exc.response.json()["error"]["status"])
        except exceptions.NotFound:
            results.append("NOT_FOUND")
    assert results == ["NOT_FOUND", "RESOURCE_EXHAUSTED"] * 2
    assert counters(fake)["GetCustomJob"] == 4


def test_server_errors(client: aiplatform_v1.JobServiceClient, fake: Any) -> None:
    set_fault(fake, kind="error", status=503, operation="ListCustomJobs", count=1)
    with pytest.raises(exceptions.ServiceUnavailable):
        list(client.list_custom_jobs(parent=PARENT))
    set_fault(fake, kind="error", status=500, count=1)
    with pytest.raises(exceptions.InternalServerError):
        client.get_custom_job(name=f"{PARENT}/customJobs/1")
    list(client.list_custom_jobs(parent=PARENT))


def test_injected_job_failure_reason(client: aiplatform_v1.JobServiceClient, fake: Any) -> None:
    set_fault(fake, kind="job_failure", match="stockout", reason="Zone has no A100 left.")
    other = client.create_custom_job(parent=PARENT, custom_job=python_job("pass", name="fine"))
    job = client.create_custom_job(parent=PARENT, custom_job=python_job("pass", name="stockout-1"))
    done = wait_done(client, job.name)
    assert done.state == JobState.JOB_STATE_FAILED
    assert done.error.code == 8 and done.error.message == "Zone has no A100 left."
    assert done.start_time is None or not done.start_time.timestamp()
    assert wait_done(client, other.name).state == JobState.JOB_STATE_SUCCEEDED


def test_slow_provisioning_keeps_job_pending(
    client: aiplatform_v1.JobServiceClient, fake: Any
) -> None:
    set_fault(fake, kind="provisioning_delay", seconds=1.0)
    job = client.create_custom_job(parent=PARENT, custom_job=python_job("pass"))
    start = time.monotonic()
    wait_state(client, job.name, JobState.JOB_STATE_PENDING)
    done = wait_done(client, job.name)
    assert done.state == JobState.JOB_STATE_SUCCEEDED
    assert time.monotonic() - start >= 0.9


def test_paused_job_stays_paused_until_cancelled(
    client: aiplatform_v1.JobServiceClient, fake: Any
) -> None:
    set_fault(fake, kind="job_failure", match="paused", state="JOB_STATE_PAUSED")
    job = client.create_custom_job(parent=PARENT, custom_job=python_job("pass", name="paused"))
    wait_state(client, job.name, JobState.JOB_STATE_PAUSED)
    client.cancel_custom_job(name=job.name)
    assert wait_done(client, job.name).state == JobState.JOB_STATE_CANCELLED


# --- capacity: a stockout fails the job from PENDING, a spent quota refuses the create ---------
A100 = {"machine_type": "a2-highgpu-1g", "accelerator_type": "NVIDIA_TESLA_A100",
        "accelerator_count": 1}  # fmt: skip
STOCKOUT = "Resources are insufficient in region: {}."


def fault_rules(fake: Any) -> list[dict[str, Any]]:
    return requests.get(f"{fake.url}/_fake/faults", timeout=5).json()["faults"]


def test_a_stockout_fails_every_job_on_the_machine(
    client: aiplatform_v1.JobServiceClient, fake: Any
) -> None:
    set_fault(fake, kind="capacity", machine="a2-highgpu-1g", seconds=0.5)
    short = [
        client.create_custom_job(parent=PARENT, custom_job=python_job("pass", f"big-{i}", A100))
        for i in range(2)
    ]
    other = client.create_custom_job(parent=PARENT, custom_job=python_job("pass", name="small"))
    wait_state(client, short[0].name, JobState.JOB_STATE_PENDING)
    for job in short:
        done = wait_done(client, job.name)
        assert done.state == JobState.JOB_STATE_FAILED
        assert (done.error.code, done.error.message) == (8, STOCKOUT.format("us-central1"))
        assert done.start_time is None or not done.start_time.timestamp()  # it never ran
    assert STOCKOUT.format("us-central1") in fake_logs(fake, short[0].name)
    assert wait_done(client, other.name).state == JobState.JOB_STATE_SUCCEEDED
    assert [rule["at"] for rule in fault_rules(fake)] == ["provision"]  # it stands for every job


def test_a_stockout_of_an_accelerator_in_one_region(
    client: aiplatform_v1.JobServiceClient, fake: Any
) -> None:
    set_fault(fake, kind="capacity", machine="NVIDIA_TESLA_A100", region="europe-west4", count=1)
    here = client.create_custom_job(parent=PARENT, custom_job=python_job("pass", "here", A100))
    assert wait_done(client, here.name).state == JobState.JOB_STATE_SUCCEEDED
    europe = PARENT.replace("us-central1", "europe-west4")
    there = client.create_custom_job(parent=europe, custom_job=python_job("pass", "there", A100))
    done = wait_done(client, there.name)
    assert (done.error.code, done.error.message) == (8, STOCKOUT.format("europe-west4"))
    assert fault_rules(fake) == []  # count 1: taken by that job


def test_a_job_waiting_out_a_stockout_can_be_cancelled(
    client: aiplatform_v1.JobServiceClient, fake: Any
) -> None:
    set_fault(fake, kind="capacity", machine="n1-highmem-8", seconds=60)
    machine = {"machine_type": "n1-highmem-8"}
    job = client.create_custom_job(parent=PARENT, custom_job=python_job("pass", "wait", machine))
    wait_state(client, job.name, JobState.JOB_STATE_PENDING)
    client.cancel_custom_job(name=job.name)
    assert wait_done(client, job.name, timeout=10).state == JobState.JOB_STATE_CANCELLED


def test_a_spent_quota_refuses_the_create(
    client: aiplatform_v1.JobServiceClient, fake: Any
) -> None:
    set_fault(fake, kind="capacity", machine="a2-highgpu-1g", at="create", count=1)
    with pytest.raises(exceptions.TooManyRequests) as info:  # the REST transport's 429
        client.create_custom_job(parent=PARENT, custom_job=python_job("pass", "quota", A100))
    assert info.value.response.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert info.value.response.json()["error"]["message"] == (
        "The following quota metrics exceed quota limits: "
        "aiplatform.googleapis.com/custom_model_training_nvidia_a100_gpus"
    )
    assert "quota" not in [job.display_name for job in client.list_custom_jobs(parent=PARENT)]
    # the REST answer itself, for a machine without GPUs; then the quota is back
    set_fault(fake, kind="capacity", machine="n1-standard-4", at="create", count=1)
    raw = requests.post(f"{fake.url}/v1/{PARENT}/customJobs", json=python_job("pass"), timeout=5)
    assert raw.status_code == 429
    assert raw.json()["error"] == {
        "code": 429,
        "message": "The following quota metrics exceed quota limits: "
        "aiplatform.googleapis.com/custom_model_training_cpus",
        "status": "RESOURCE_EXHAUSTED",
    }
    job = client.create_custom_job(parent=PARENT, custom_job=python_job("pass", "quota", A100))
    assert wait_done(client, job.name).state == JobState.JOB_STATE_SUCCEEDED


def test_a_capacity_rule_takes_only_the_stages_vertex_has(fake: Any) -> None:
    rule = {"kind": "capacity", "machine": "a2-highgpu-1g", "at": "queue"}
    resp = requests.post(f"{fake.url}/_fake/faults", json=rule, timeout=5)
    assert resp.status_code == 400 and "provision" in resp.json()["error"]


# --- FLEX_START (Dynamic Workload Scheduler): a stockout is waited out, up to maxWaitDuration ---
def flex_job(name: str, machine: dict[str, Any] = A100, **scheduling: Any) -> dict[str, Any]:
    return python_job("pass", name, machine, scheduling={"strategy": "FLEX_START", **scheduling})


def test_flex_start_waits_out_a_stockout_that_fails_a_standard_job(
    client: aiplatform_v1.JobServiceClient, fake: Any
) -> None:
    set_fault(fake, kind="capacity", machine="a2-highgpu-1g", seconds=2)
    flex = client.create_custom_job(parent=PARENT, custom_job=flex_job("flex-waits"))
    standard = client.create_custom_job(parent=PARENT, custom_job=python_job("pass", "std", A100))
    pending = wait_state(client, flex.name, JobState.JOB_STATE_PENDING)
    assert not pending.start_time and not pending.end_time and not pending.error.message
    assert pending.job_spec.scheduling.strategy == aiplatform_v1.Scheduling.Strategy.FLEX_START
    # the standard job on the same machine fails as it always has
    failed = wait_done(client, standard.name)
    assert failed.state == JobState.JOB_STATE_FAILED
    assert (failed.error.code, failed.error.message) == (8, STOCKOUT.format("us-central1"))
    done = wait_done(client, flex.name)
    assert done.state == JobState.JOB_STATE_SUCCEEDED, done.error
    waited = done.start_time.timestamp() - done.create_time.timestamp()
    assert waited >= 1.9, waited  # PENDING for the rule's seconds, then it ran
    logs = fake_logs(fake, flex.name)
    assert STOCKOUT.format("us-central1") in logs
    assert "Resources became available in region: us-central1." in logs
    assert [rule["machine"] for rule in fault_rules(fake)] == ["a2-highgpu-1g"]  # still standing


def test_flex_start_fails_when_its_max_wait_passes(
    client: aiplatform_v1.JobServiceClient, fake: Any
) -> None:
    set_fault(fake, kind="capacity", machine="NVIDIA_TESLA_A100", seconds=60)
    job = client.create_custom_job(
        parent=PARENT, custom_job=flex_job("flex", max_wait_duration="1s")
    )
    done = wait_done(client, job.name, timeout=20)
    assert done.state == JobState.JOB_STATE_FAILED
    assert done.error.code == 8
    assert done.error.message == (
        "No resources became available in region us-central1 within scheduling.maxWaitDuration 1s."
    )
    assert not done.start_time  # it never ran
    waited = done.end_time.timestamp() - done.create_time.timestamp()
    assert 0.9 <= waited < 30, waited


def test_flex_start_takes_a_counted_stockout_and_waits_until_it_is_cleared(
    client: aiplatform_v1.JobServiceClient, fake: Any
) -> None:
    """A counted rule is consumed by the FLEX_START job that meets it; without ``seconds`` the
    shortage lasts, for that job, until the rules are cleared ("0s": no limit to the wait)."""
    l4 = _machine("g2-standard-8", "NVIDIA_L4", 1)
    set_fault(fake, kind="capacity", machine="g2-standard-8", count=1)
    first = client.create_custom_job(
        parent=PARENT, custom_job=flex_job("flex-first", l4, max_wait_duration="0s")
    )
    wait_state(client, first.name, JobState.JOB_STATE_PENDING)
    wait_for(lambda: fault_rules(fake) == [], 10, "the counted rule to be taken")
    second = client.create_custom_job(parent=PARENT, custom_job=flex_job("flex-second", l4))
    assert wait_done(client, second.name).state == JobState.JOB_STATE_SUCCEEDED
    assert client.get_custom_job(name=first.name).state == JobState.JOB_STATE_PENDING
    clear_faults(fake)
    assert wait_done(client, first.name).state == JobState.JOB_STATE_SUCCEEDED


def test_a_waiting_flex_start_job_can_be_cancelled(
    client: aiplatform_v1.JobServiceClient, fake: Any
) -> None:
    set_fault(fake, kind="capacity", machine="a2-highgpu-1g")
    job = client.create_custom_job(parent=PARENT, custom_job=flex_job("flex-cancel"))
    wait_state(client, job.name, JobState.JOB_STATE_PENDING)
    client.cancel_custom_job(name=job.name)
    done = wait_done(client, job.name, timeout=10)
    assert done.state == JobState.JOB_STATE_CANCELLED and done.error.code == 1


def test_flex_start_jobs_the_service_accepts(client: aiplatform_v1.JobServiceClient) -> None:
    """Every pool on the same DWS GPU machine, a 7-day timeout, no wait limit."""
    body = flex_job("flex-ok", _machine("a3-highgpu-8g", "NVIDIA_H100_80GB", 8),
                    timeout="604800s", max_wait_duration="0s")  # fmt: skip
    body["job_spec"]["worker_pool_specs"].append({**_pool(body), "replica_count": 2})
    job = client.create_custom_job(parent=PARENT, custom_job=body)
    assert job.state == JobState.JOB_STATE_QUEUED
    assert job.job_spec.scheduling.max_wait_duration.total_seconds() == 0
    assert job.job_spec.scheduling.timeout.total_seconds() == 604800
    client.cancel_custom_job(name=job.name)


def test_log_entries_since_a_timestamp(client: aiplatform_v1.JobServiceClient, fake: Any) -> None:
    code = "import time\nprint('one', flush=True)\ntime.sleep(1.2)\nprint('two')"
    job = client.create_custom_job(parent=PARENT, custom_job=python_job(code, name="since"))
    wait_done(client, job.name)
    job_id = job.name.rsplit("/", 1)[-1]

    def entries(flt: str) -> list[dict[str, Any]]:
        body = {"resourceNames": ["projects/stepop-test"], "filter": flt, "pageSize": 1}
        out: list[dict[str, Any]] = []
        while True:
            page = requests.post(f"{fake.url}/v2/entries:list", json=body, timeout=5).json()
            out += page.get("entries", [])
            if not page.get("nextPageToken"):
                return out
            body["pageToken"] = page["nextPageToken"]

    base = f'resource.type="ml_job" AND resource.labels.job_id="{job_id}"'
    everything = entries(base)
    assert [e["textPayload"] for e in everything] == ["one", "two"]
    first = everything[0]["timestamp"]
    later = entries(f'{base} AND timestamp>"{first}"')
    assert [e["textPayload"] for e in later] == ["two"]


SPOT_CODE = """
import os, time
marker = '/gcs/vertex-selftest/spot/%s' % os.environ['CLOUD_ML_JOB_ID']
if os.path.exists(marker):
    print('resumed')
else:
    os.makedirs(os.path.dirname(marker), exist_ok=True)
    open(marker, 'w').close()
    print('first attempt', flush=True)
    time.sleep(60)
"""


def test_a_preempted_spot_attempt_restarts_and_resumes(
    client: aiplatform_v1.JobServiceClient, fake: Any
) -> None:
    # The rule comes once the first attempt has written its marker (a rule given before the
    # job could preempt it before that, on a loaded machine, and the next attempt would be a
    # first one again): preempt rules are checked all along a running attempt.
    body = python_job(SPOT_CODE, name="spot-late-rule", scheduling={"strategy": "SPOT"})
    job = client.create_custom_job(parent=PARENT, custom_job=body)
    wait_for(lambda: "first attempt" in fake_logs(fake, job.name), 60, "the first attempt")
    assert client.get_custom_job(name=job.name).state == JobState.JOB_STATE_RUNNING
    set_fault(fake, kind="preempt", after_seconds=0, match="spot-late-rule")
    done = wait_done(client, job.name, timeout=60)
    assert done.state == JobState.JOB_STATE_SUCCEEDED, done.error
    logs = fake_logs(fake, job.name)
    assert "preempted" in logs and "resumed" in logs


def test_preemption_without_retries_fails(
    client: aiplatform_v1.JobServiceClient, fake: Any
) -> None:
    set_fault(fake, kind="preempt", after_seconds=0.3)
    body = python_job(
        "import time; time.sleep(60)",
        scheduling={"strategy": "SPOT", "disable_retries": True},
    )
    job = client.create_custom_job(parent=PARENT, custom_job=body)
    done = wait_done(client, job.name, timeout=60)
    assert done.state == JobState.JOB_STATE_FAILED
    assert done.error.code == 14 and "preempted" in done.error.message


def test_delayed_logs(client: aiplatform_v1.JobServiceClient, fake: Any) -> None:
    set_fault(fake, kind="log_delay", seconds=3600)
    job = client.create_custom_job(parent=PARENT, custom_job=python_job("print('late line')"))
    wait_done(client, job.name)
    assert "late line" not in fake_logs(fake, job.name)
    clear_faults(fake)
    assert "late line" in fake_logs(fake, job.name)


# --- refusals --------------------------------------------------------------------------------
def _pool(body: dict[str, Any]) -> dict[str, Any]:
    return body["job_spec"]["worker_pool_specs"][0]


def _machine(machine_type: str, acc: str | None = None, count: int = 0) -> dict[str, Any]:
    spec: dict[str, Any] = {"machine_type": machine_type}
    if acc:
        spec.update(accelerator_type=acc, accelerator_count=count)
    return spec


def _flex(body: dict[str, Any], machine: dict[str, Any] | None = None, **sched: Any) -> None:
    """Make ``body`` a FLEX_START job, on ``machine`` (one A100) unless told."""
    _pool(body).update(machine_spec=machine or _machine("a2-highgpu-1g", "NVIDIA_TESLA_A100", 1))
    body["job_spec"]["scheduling"] = {"strategy": "FLEX_START", **sched}


def _flex_two_pools(body: dict[str, Any]) -> None:
    _flex(body)
    second = _machine("a2-highgpu-2g", "NVIDIA_TESLA_A100", 2)
    body["job_spec"]["worker_pool_specs"].append({**_pool(body), "machine_spec": second})


REFUSALS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "empty display name": (lambda b: b.update(display_name=""), "custom_job.display_name"),
    "display name over 128": (lambda b: b.update(display_name="x" * 129), "128"),
    "uppercase label key": (lambda b: b.update(labels={"Team": "ml"}), "Label key 'Team'"),
    "label key starts with digit": (lambda b: b.update(labels={"1team": "ml"}), "1team"),
    "uppercase label value": (lambda b: b.update(labels={"team": "ML"}), "Label value 'ML'"),
    "label value over 63": (lambda b: b.update(labels={"k": "v" * 64}), "63"),
    "label key over 63": (lambda b: b.update(labels={"k" * 64: "v"}), "63"),
    "65 labels": (lambda b: b.update(labels={f"k{i}": "v" for i in range(65)}), "64 labels"),
    "no worker pools": (
        lambda b: b["job_spec"].update(worker_pool_specs=[]),
        "worker_pool_specs; Message: Required field",
    ),
    "no image": (lambda b: _pool(b)["container_spec"].pop("image_uri"), "image_uri"),
    "no machine type": (lambda b: _pool(b).update(machine_spec={}), "machine_type"),
    "unknown machine type": (
        lambda b: _pool(b).update(machine_spec=_machine("n1-standard-3")),
        'Machine type "n1-standard-3" is not supported',
    ),
    "a2 with T4": (
        lambda b: _pool(b).update(machine_spec=_machine("a2-highgpu-1g", "NVIDIA_TESLA_T4", 1)),
        'Accelerator "NVIDIA_TESLA_T4" is not supported for machine type "a2-highgpu-1g"',
    ),
    "a2-highgpu-1g with two A100": (
        lambda b: _pool(b).update(machine_spec=_machine("a2-highgpu-1g", "NVIDIA_TESLA_A100", 2)),
        "Accelerator count 2",
    ),
    "a2 without accelerator": (
        lambda b: _pool(b).update(machine_spec=_machine("a2-highgpu-1g")),
        "requires accelerator_type",
    ),
    "g2 with T4": (
        lambda b: _pool(b).update(machine_spec=_machine("g2-standard-8", "NVIDIA_TESLA_T4", 1)),
        "not supported for machine type",
    ),
    "three T4 on n1": (
        lambda b: _pool(b).update(machine_spec=_machine("n1-standard-8", "NVIDIA_TESLA_T4", 3)),
        "Accelerator count 3",
    ),
    "n1-standard-32 with one V100": (
        lambda b: _pool(b).update(machine_spec=_machine("n1-standard-32", "NVIDIA_TESLA_V100", 1)),
        "too many vCPUs",
    ),
    "L4 on n1": (
        lambda b: _pool(b).update(machine_spec=_machine("n1-standard-8", "NVIDIA_L4", 1)),
        "not supported for machine type",
    ),
    "count without type": (
        lambda b: _pool(b)["machine_spec"].update(accelerator_count=1),
        "no accelerator_type",
    ),
    "two replicas in pool 0": (lambda b: _pool(b).update(replica_count=2), "exactly 1 replica"),
    "zero replicas": (lambda b: _pool(b).update(replica_count=0), "replica_count"),
    "base output not gs": (
        lambda b: b["job_spec"].update(base_output_directory={"output_uri_prefix": "s3://x/y"}),
        "gs://",
    ),
    "bad boot disk": (
        lambda b: _pool(b).update(disk_spec={"boot_disk_type": "pd-fast"}),
        "boot_disk_type",
    ),
    "more than 100 env vars": (
        lambda b: _pool(b)["container_spec"].update(
            env=[{"name": f"V{i}", "value": "v"} for i in range(101)]
        ),
        "At most 100 environment variables",
    ),
    "bad env name": (
        lambda b: _pool(b)["container_spec"].update(env=[{"name": "1X", "value": "v"}]),
        "env[0].name",
    ),
    "experiment without a service account": (
        lambda b: b["job_spec"].update(experiment=f"{CONTEXTS}/churn"),
        "service_account; Message: A service account is required with an experiment",
    ),
    "experiment run without its experiment": (
        lambda b: b["job_spec"].update(
            experiment_run=f"{CONTEXTS}/churn-run-1", service_account=ACCOUNT
        ),
        "experiment_run requires experiment",
    ),
    "flex start without a GPU": (
        lambda b: _flex(b, _machine("n1-standard-4")),
        "worker_pool_specs[0].machine_spec.accelerator_type; Message: Scheduling strategy "
        "FLEX_START requires a GPU accelerator in every worker pool, one of NVIDIA_L4, "
        "NVIDIA_TESLA_A100, NVIDIA_A100_80GB, NVIDIA_H100_80GB, NVIDIA_H100_MEGA_80GB, "
        "NVIDIA_H200_141GB, NVIDIA_B200; got none.",
    ),
    "flex start on a T4": (
        lambda b: _flex(b, _machine("n1-standard-8", "NVIDIA_TESLA_T4", 1)),
        "accelerator_type; Message: Scheduling strategy FLEX_START requires a GPU accelerator "
        "in every worker pool, one of NVIDIA_L4",
    ),
    "flex start with a timeout over 7 days": (
        lambda b: _flex(b, timeout="604801s"),
        "scheduling.timeout; Message: Scheduling strategy FLEX_START allows a timeout of at most "
        "7 days (604800s); got 604801s.",
    ),
    "flex start with pools on different machines": (
        _flex_two_pools,
        "worker_pool_specs[1].machine_spec; Message: Scheduling strategy FLEX_START requires "
        "the same machine_spec in every worker pool; it differs from "
        "worker_pool_specs[0].machine_spec.",
    ),
    "experiment that is no context name": (
        lambda b: b["job_spec"].update(experiment="churn", service_account=ACCOUNT),
        "'churn' is not a context name",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refusals(client: aiplatform_v1.JobServiceClient, case: str) -> None:
    mutate, needle = REFUSALS[case]
    body = python_job("pass")
    mutate(body)
    with pytest.raises(exceptions.BadRequest) as info:
        client.create_custom_job(parent=PARENT, custom_job=body)
    payload = info.value.response.json()["error"]
    assert payload["code"] == 400 and payload["status"] == "INVALID_ARGUMENT"
    assert needle in payload["message"], payload["message"]


def test_an_experiment_and_its_run_must_exist(
    client: aiplatform_v1.JobServiceClient, fake: Any
) -> None:
    """Vertex refuses a job naming an Experiment (or ExperimentRun) context nobody created; the
    experiment made through the official MetadataService client is accepted."""
    experiment = f"{CONTEXTS}/churn-exists"
    job = python_job("pass", service_account=ACCOUNT, experiment=experiment)
    with pytest.raises(exceptions.NotFound, match="experiment .*churn-exists.* is not found"):
        client.create_custom_job(parent=PARENT, custom_job=job)
    metadata = aiplatform_v1.MetadataServiceClient(
        transport="rest",
        client_options=ClientOptions(api_endpoint=fake.url),
        credentials=AnonymousCredentials(),
    )
    made = metadata.create_context(
        parent=CONTEXTS.rsplit("/", 1)[0],
        context_id="churn-exists",
        context={"display_name": "churn-exists", "schema_title": "system.Experiment"},
    )
    assert made.name == experiment and metadata.get_context(name=experiment).name == experiment
    created = client.create_custom_job(parent=PARENT, custom_job=job)
    assert created.job_spec.experiment == experiment and not created.job_spec.experiment_run
    client.cancel_custom_job(name=created.name)
    run = python_job("pass", service_account=ACCOUNT, experiment=experiment,
                     experiment_run=f"{experiment}-never-made")  # fmt: skip
    with pytest.raises(exceptions.NotFound, match="experiment run .*never-made.* is not found"):
        client.create_custom_job(parent=PARENT, custom_job=run)
    other_region = experiment.replace("us-central1", "europe-west4")
    elsewhere = python_job("pass", service_account=ACCOUNT, experiment=other_region)
    with pytest.raises(exceptions.NotFound):
        client.create_custom_job(parent=PARENT, custom_job=elsewhere)


@pytest.mark.parametrize(
    ("machine", "acc", "count"),
    [
        ("a2-highgpu-1g", "NVIDIA_TESLA_A100", 1),
        ("a2-ultragpu-8g", "NVIDIA_A100_80GB", 8),
        ("a3-highgpu-8g", "NVIDIA_H100_80GB", 8),
        ("g2-standard-8", "NVIDIA_L4", 1),
        ("g2-standard-24", "NVIDIA_L4", 2),
        ("n1-standard-8", "NVIDIA_TESLA_T4", 1),
        ("n1-highmem-8", "NVIDIA_TESLA_V100", 1),
        ("n1-standard-16", "NVIDIA_TESLA_P100", 2),
        ("e2-standard-4", None, 0),
        ("cloud-tpu", "TPU_V2", 8),
        ("cloud-tpu", "TPU_V3", 8),
    ],
)
def test_real_pairings_are_accepted(
    client: aiplatform_v1.JobServiceClient, machine: str, acc: str | None, count: int
) -> None:
    job = client.create_custom_job(
        parent=PARENT, custom_job=python_job("pass", machine=_machine(machine, acc, count))
    )
    assert job.state == JobState.JOB_STATE_QUEUED
    client.cancel_custom_job(name=job.name)


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda b: b["jobSpec"].update(scheduling={"strategy": "CHEAP"}), "scheduling.strategy"),
        (lambda b: b["jobSpec"].update(scheduling={"timeout": "1h"}), "scheduling.timeout"),
        (
            lambda b: b["jobSpec"]["workerPoolSpecs"][0]["machineSpec"].update(
                acceleratorType="NVIDIA_TESLA_X1"
            ),
            "accelerator_type",
        ),
    ],
)
def test_bad_enums_and_durations_over_raw_rest(
    fake: Any, mutate: Callable[[dict[str, Any]], None], needle: str
) -> None:
    """What the typed client cannot even send: the JSON mapping's own refusals."""
    body = {
        "displayName": "raw",
        "jobSpec": {
            "workerPoolSpecs": [
                {
                    "machineSpec": {"machineType": "n1-standard-4"},
                    "replicaCount": "1",
                    "containerSpec": {"imageUri": "x", "command": ["python3", "-c", "pass"]},
                }
            ]
        },
    }
    mutate(body)
    resp = requests.post(f"{fake.url}/v1/{PARENT}/customJobs", json=body, timeout=5)
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["status"] == "INVALID_ARGUMENT" and needle in err["message"]


# --- one real container --------------------------------------------------------------------
def _engine_image() -> str | None:
    """The registry image the engine can run, or None when no engine answers."""
    try:
        import docker

        engine = docker.from_env(timeout=5)
        engine.ping()
    except Exception:
        return None
    registry = os.environ.get("STEPOP_TEST_REGISTRY", "127.0.0.1:5000")
    base = os.environ.get("STEPOP_TEST_BASE_IMAGE", "stepop-base/python:3.11-bookworm")
    image = f"{registry}/{base}"
    try:
        engine.images.get(image)
    except Exception:
        try:
            repo, tag = image.rsplit(":", 1)
            engine.images.pull(repo, tag=tag)
        except Exception:
            return None
    return image


@pytest.mark.container
def test_container_mode_job(client: aiplatform_v1.JobServiceClient, bucket: storage.Bucket) -> None:
    image = _engine_image()
    if image is None:
        pytest.skip("no container engine (or no base image in the local registry)")
    bucket.blob("inputs/data.txt").upload_from_string("from a container")
    body = python_job(
        OUTPUT_CODE,
        name="container",
        base_output_directory={"output_uri_prefix": f"gs://{BUCKET}/runs/container"},
    )
    body["labels"]["stepop_fake_mode"] = "container"
    _pool(body)["container_spec"]["image_uri"] = image
    job = client.create_custom_job(parent=PARENT, custom_job=body)
    done = wait_done(client, job.name, timeout=180)
    assert done.state == JobState.JOB_STATE_SUCCEEDED, done.error
    text = bucket.blob("runs/container/model/model.txt").download_as_text()
    assert text == "FROM A CONTAINER hello"


# --- the fake as `make cloud-up` runs it ---------------------------------------------------------
def test_stack_fake_runs_a_job(cloud_stack: dict[str, str]) -> None:
    """What a new user does with only .cloud/env: the stack's fake, its emulator, the client."""
    url = cloud_stack.get("STEPOP_VERTEX_ENDPOINT")
    if not url:
        pytest.skip("the stack runs no Vertex fake")
    gcs = storage.Client(
        project="stepop-local",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": cloud_stack["STORAGE_EMULATOR_HOST"]},
    )
    name = f"stack-vertex-{os.getpid()}"
    try:
        bkt = gcs.create_bucket(name)
    except exceptions.Conflict:
        bkt = gcs.bucket(name)
    client = aiplatform_v1.JobServiceClient(
        transport="rest",
        client_options=ClientOptions(api_endpoint=url),
        credentials=AnonymousCredentials(),
    )
    code = f"open('/gcs/{name}/hello.txt', 'w').write('hi from the stack')"
    job = client.create_custom_job(parent=PARENT, custom_job=python_job(code, name="stack"))
    done = wait_done(client, job.name)
    assert done.state == JobState.JOB_STATE_SUCCEEDED, done.error
    assert bkt.blob("hello.txt").download_as_text() == "hi from the stack"
