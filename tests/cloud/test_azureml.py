"""Self-tests of the Azure ML fake, through azure-ai-ml's MLClient (and raw ARM REST) only.

The fake runs in this process; storage is Azurite (the stack's when ``.cloud/env`` answers or
AZURE_STORAGE_CONNECTION_STRING is set, else one started here from part A's npm cache). MLClient
reaches the fake over https (self-signed certificate passed as ``connection_verify``), as it
must for its workspace and run-history calls.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from azure.ai.ml import Input, MLClient, Output, command
from azure.ai.ml.entities import Environment, JobResourceConfiguration, QueueSettings
from azure.core.credentials import AccessToken
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.storage.blob import BlobServiceClient

from cloud import azureml, stack
from tests.waiting import free_port, wait_for

RG = "stepop-rg"
WS = "stepop-ws"
SUB = azureml.SUBSCRIPTION
WS_PATH = (
    f"/subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.MachineLearningServices/"
    f"workspaces/{WS}"
)
CONTAINER = "azureml-blobstore"
IMAGE = "127.0.0.1:5000/stepop-base/python:3.11-bookworm"
AZURITE_KEY = stack.AZURITE_KEY
TERMINAL = ("Completed", "Failed", "Canceled")


class StaticToken:
    """A credential that returns a fixed token (the fake checks none)."""

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken("fake-token", int(time.time()) + 3600)


@pytest.fixture(scope="module")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An Azurite connection string: the environment's, the running stack's, or our own."""
    if os.environ.get("AZURE_STORAGE_CONNECTION_STRING"):
        yield os.environ["AZURE_STORAGE_CONNECTION_STRING"]
        return
    env = stack.read_env()
    if env.get("AZURE_STORAGE_CONNECTION_STRING") and stack.running(env):
        yield env["AZURE_STORAGE_CONNECTION_STRING"]
        return
    try:
        binary = stack.azurite_bin()
    except Exception as exc:
        pytest.skip(f"Azurite is not available (npm): {exc}")
    port = free_port()
    log = open(tmp_path_factory.mktemp("azurite") / "azurite.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [str(binary), "--blobHost", "127.0.0.1", "--blobPort", str(port),
         "--inMemoryPersistence", "--skipApiVersionCheck", "--disableTelemetry", "--loose"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}/{stack.AZURITE_ACCOUNT}"

    def answers() -> bool:
        try:
            urllib.request.urlopen(endpoint, timeout=1).close()
        except urllib.error.HTTPError:
            return True
        except OSError:
            return proc.poll() is not None
        return True

    wait_for(answers, 60, "Azurite")
    assert proc.poll() is None, "Azurite exited"
    yield (
        f"DefaultEndpointsProtocol=http;AccountName={stack.AZURITE_ACCOUNT};"
        f"AccountKey={AZURITE_KEY};BlobEndpoint={endpoint};"
    )
    proc.terminate()
    proc.wait(timeout=10)
    log.close()


@pytest.fixture(scope="module")
def blobs(azurite: str) -> BlobServiceClient:
    service = BlobServiceClient.from_connection_string(azurite)
    for name in (CONTAINER, "azureml"):
        with contextlib.suppress(Exception):
            service.create_container(name)
    return service


@pytest.fixture(scope="module")
def fake(azurite: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    server = azureml.serve(
        "127.0.0.1",
        0,
        storage_connection_string=azurite,
        lro_retry_after=1,
        tmp_base=str(tmp_path_factory.mktemp("aml")),
        tls_dir=str(tmp_path_factory.mktemp("tls")),
    )
    yield server
    server.shutdown()


@pytest.fixture(autouse=True)
def _clean_faults(fake: Any) -> Iterator[None]:
    requests.post(f"{fake.url}/_fake/reset", json={}, timeout=5)
    yield
    clear_faults(fake)


@pytest.fixture(scope="module")
def ml(fake: Any) -> MLClient:
    return MLClient(
        StaticToken(),
        SUB,
        RG,
        WS,
        cloud="StepopFakeCloud",
        cloud_metadata=azureml.cloud_metadata(fake.https_url),
        connection_verify=fake.ca_bundle,
    )


def test_the_certificate_holds_for_the_name_compose_containers_use(fake: Any) -> None:
    """In the compose `emulated` profile, Airflow's containers call https://host.docker.internal."""
    import socket
    import ssl
    from urllib.parse import urlsplit

    port = urlsplit(fake.https_url).port
    context = ssl.create_default_context(cafile=fake.ca_bundle)
    for name in ("127.0.0.1", "localhost", "host.docker.internal"):
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname=name) as tls,
        ):
            assert tls.version()  # the handshake checked the certificate against the name


_counter = iter(range(10**6))


def unique(prefix: str) -> str:
    return f"{prefix}-{os.getpid()}-{next(_counter)}-{int(time.time() * 1000) % 10**6}"


def make_job(cmd: str, name: str | None = None, **kwargs: Any) -> Any:
    job = command(
        command=cmd,
        environment=Environment(image=IMAGE),
        name=name or unique("job"),
        display_name="selftest",
        experiment_name="selftest",
        **kwargs,
    )
    job.resources = JobResourceConfiguration(instance_type="Standard_NC6s_v3", instance_count=1)
    return job


def wait_done(ml: MLClient, name: str, timeout: float = 60) -> Any:
    def done() -> Any:
        job = ml.jobs.get(name)
        return job if job.status in TERMINAL else None

    return wait_for(done, timeout, f"{name} to end")


def wait_status(ml: MLClient, name: str, status: str) -> Any:
    return wait_for(
        lambda: job if (job := ml.jobs.get(name)).status == status else None,
        60,
        f"{name} to be {status}",
    )


def run_details(fake: Any, name: str) -> dict[str, Any]:
    url = f"{fake.url}/history/v1.0{WS_PATH}/runs/{name}/details"
    return requests.get(url, timeout=5).json()


def set_fault(fake: Any, **rule: Any) -> None:
    resp = requests.post(f"{fake.url}/_fake/faults", json=rule, timeout=5)
    assert resp.status_code == 200, resp.text


def clear_faults(fake: Any) -> None:
    requests.delete(f"{fake.url}/_fake/faults", timeout=5).raise_for_status()


def counters(fake: Any) -> dict[str, int]:
    return requests.get(f"{fake.url}/_fake/counters", timeout=5).json()["counters"]


def logs(fake: Any, name: str) -> str:
    return requests.get(f"{fake.url}/_fake/logs/{name}", timeout=5).text


def put_raw(fake: Any, name: str, props: dict[str, Any]) -> requests.Response:
    url = f"{fake.url}{WS_PATH}/jobs/{name}?api-version=2023-04-01-preview"
    return requests.put(url, json={"properties": props}, timeout=5)


def env_id(ml: MLClient) -> str:
    """An environment version created through the client, as an ARM id."""
    env = ml.environments.create_or_update(
        Environment(name="selftest-env", version="1", image=IMAGE)
    )
    return f"azureml:{env.id}"


# --- the happy path ---------------------------------------------------------------------------
JOB_CMD = (
    "cat ${{inputs.data}}/a.txt ${{inputs.single}} > ${{outputs.out}}/result.txt && "
    'echo "n=${{inputs.n}} run=$AZUREML_RUN_ID in=$AZURE_ML_INPUT_data" && '
    "python -c \"import os; print('greeting', os.environ['GREETING'])\" && "
    "echo done > ${{outputs.auto}}/marker.txt && echo to-stderr >&2"
)


def test_command_job_runs_to_completion_with_outputs_in_azurite(
    ml: MLClient, blobs: BlobServiceClient, fake: Any
) -> None:
    base = unique("in")
    blobs.get_blob_client(CONTAINER, f"{base}/folder/a.txt").upload_blob(b"alpha\n")
    blobs.get_blob_client(CONTAINER, f"{base}/b.txt").upload_blob(b"beta\n")
    name = unique("ok")
    job = make_job(
        JOB_CMD,
        name=name,
        inputs={
            "data": Input(
                type="uri_folder",
                path=f"azureml://datastores/workspaceblobstore/paths/{base}/folder/",
            ),
            "single": Input(
                type="uri_file",
                path=f"azureml://datastores/workspaceblobstore/paths/{base}/b.txt",
                mode="download",
            ),
            "n": 3,
        },
        outputs={
            "out": Output(
                type="uri_folder",
                path=f"azureml://datastores/workspaceblobstore/paths/{base}/out/",
                mode="rw_mount",
            ),
            "auto": Output(type="uri_folder"),
        },
        environment_variables={"GREETING": "hello"},
    )
    created = ml.jobs.create_or_update(job)
    assert created.name == name and created.status == "NotStarted"
    done = wait_done(ml, name)
    assert done.status == "Completed", run_details(fake, name).get("error")
    result = blobs.get_blob_client(CONTAINER, f"{base}/out/result.txt").download_blob().readall()
    assert result == b"alpha\nbeta\n"
    marker = f"azureml/{name}/auto/marker.txt"  # the default output path Azure ML picks
    assert blobs.get_blob_client(CONTAINER, marker).download_blob().readall() == b"done\n"
    text = logs(fake, name)
    assert f"n=3 run={name} in=/mnt/azureml/" in text or f"n=3 run={name} in=" in text
    assert "greeting hello" in text and "to-stderr" in text
    details = run_details(fake, name)
    assert details["status"] == "Completed" and details["startTimeUtc"] and details["endTimeUtc"]
    assert list(details["logFiles"]) == ["user_logs/std_log.txt"]
    log_blob = f"ExperimentRun/dcid.{name}/user_logs/std_log.txt"
    assert b"greeting hello" in blobs.get_blob_client("azureml", log_blob).download_blob().readall()
    got = counters(fake)
    assert got["Jobs_CreateOrUpdate"] == 1 and got["EnvironmentVersions_CreateOrUpdate"] >= 1


def test_stream_prints_logs_of_a_running_job(
    ml: MLClient, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from azure.ai.ml.operations._run_history_constants import RunHistoryConstants

    monkeypatch.setattr(RunHistoryConstants, "_WAIT_COMPLETION_POLLING_INTERVAL_MIN", 0.1)
    name = unique("stream")
    ml.jobs.create_or_update(make_job("echo first line; sleep 1.5; echo last line", name=name))
    ml.jobs.stream(name)
    out = capsys.readouterr().out
    assert f"RunId: {name}" in out
    assert "first line" in out and "last line" in out
    assert ml.jobs.get(name).status == "Completed"


def test_a_log_file_answers_byte_ranges_as_blob_storage(ml: MLClient, fake: Any) -> None:
    """The logFiles URLs are Blob Storage SAS URLs on Azure: a reader pages through them."""
    name = unique("ranges")
    ml.jobs.create_or_update(make_job("echo 0123456789", name=name))
    wait_done(ml, name)
    url = run_details(fake, name)["logFiles"]["user_logs/std_log.txt"]
    whole = requests.get(url, timeout=5)
    assert whole.status_code == 200 and whole.content.endswith(b"0123456789\n")
    size = len(whole.content)
    part = requests.get(url, headers={"Range": f"bytes={size - 5}-{size + 99}"}, timeout=5)
    assert part.status_code == 206 and part.content == b"6789\n"  # the end clipped to the blob's
    assert part.headers["Content-Range"] == f"bytes {size - 5}-{size - 1}/{size}"
    rest = requests.get(url, headers={"Range": f"bytes={size - 3}-"}, timeout=5)
    assert rest.status_code == 206 and rest.content == b"89\n"
    past = requests.get(url, headers={"Range": f"bytes={size}-"}, timeout=5)
    assert past.status_code == 416 and past.headers["Content-Range"] == f"bytes */{size}"


def test_direct_mode_passes_uris(ml: MLClient, fake: Any) -> None:
    name = unique("direct")
    uri = "azureml://datastores/workspaceblobstore/paths/somewhere/"
    job = make_job(
        "echo in=${{inputs.data}} out=${{outputs.out}}",
        name=name,
        inputs={"data": Input(type="uri_folder", path=uri, mode="direct")},
        outputs={"out": Output(type="uri_folder", path=uri + "out/", mode="direct")},
    )
    ml.jobs.create_or_update(job)
    assert wait_done(ml, name).status == "Completed"
    assert f"in={uri} out={uri}out/" in logs(fake, name)


def test_distributed_job_gets_ranks(ml: MLClient, blobs: BlobServiceClient) -> None:
    from azure.ai.ml import PyTorchDistribution

    name = unique("ddp")
    cmd = "echo $RANK $LOCAL_RANK $NODE_RANK $WORLD_SIZE > ${{outputs.out}}/rank-$RANK.txt"
    job = make_job(
        cmd,
        name=name,
        outputs={"out": Output(type="uri_folder")},
        distribution=PyTorchDistribution(process_count_per_instance=2),
    )
    job.resources = JobResourceConfiguration(instance_type="Standard_NC12s_v3", instance_count=2)
    ml.jobs.create_or_update(job)
    assert wait_done(ml, name).status == "Completed"
    seen = set()
    for rank in range(4):
        blob = f"azureml/{name}/out/rank-{rank}.txt"
        seen.add(blobs.get_blob_client(CONTAINER, blob).download_blob().readall().decode().strip())
    assert seen == {"0 0 0 4", "1 1 0 4", "2 0 1 4", "3 1 1 4"}


def test_list_and_idempotent_put(ml: MLClient, fake: Any) -> None:
    name = unique("listed")
    job = make_job("true", name=name)
    ml.jobs.create_or_update(job)
    wait_done(ml, name)
    assert name in {j.name for j in ml.jobs.list()}
    # the same job PUT again (a retried submit) is answered, not refused, and runs once
    again = ml.jobs.create_or_update(make_job("true", name=name))
    assert again.status == "Completed"
    with pytest.raises(HttpResponseError) as info:
        ml.jobs.create_or_update(make_job("false", name=name))
    assert info.value.status_code == 400 and "already exists" in str(info.value)


def test_workspace_datastore_and_environment(ml: MLClient, fake: Any) -> None:
    ws = ml.workspaces.get(WS)
    assert ws.name == WS
    store = ml.datastores.get_default()
    assert store.name == "workspaceblobstore" and store.container_name == CONTAINER
    env = ml.environments.create_or_update(
        Environment(name="selftest-env", version="7", image=IMAGE)
    )
    assert ml.environments.get("selftest-env", version="7").image == IMAGE
    assert env.version == "7"


# --- cancel and failures ---------------------------------------------------------------------
def test_cancel_with_lro(ml: MLClient, fake: Any) -> None:
    name = unique("cancel")
    ml.jobs.create_or_update(make_job("echo started; sleep 120", name=name))
    wait_status(ml, name, "Running")
    wait_for(lambda: "started" in logs(fake, name), 30, "the first log line")
    poller = ml.jobs.begin_cancel(name)
    poller.result(timeout=30)
    assert poller.done()
    assert ml.jobs.get(name).status == "Canceled"
    assert counters(fake)["OperationResults_Get"] >= 1


def test_failed_job_reports_reason(ml: MLClient, fake: Any) -> None:
    from azure.ai.ml.exceptions import JobException

    name = unique("fail")
    ml.jobs.create_or_update(make_job("echo 'bad things' >&2; exit 3", name=name))
    done = wait_done(ml, name)
    assert done.status == "Failed"
    error = run_details(fake, name)["error"]["error"]
    assert error["code"] == "UserError"
    assert "exited with status code 3" in error["message"] and "bad things" in error["message"]
    with pytest.raises(JobException) as info:
        ml.jobs.stream(name)
    assert "exited with status code 3" in str(info.value)


def test_missing_input_data_fails_job(ml: MLClient, fake: Any) -> None:
    name = unique("noinput")
    job = make_job(
        "ls ${{inputs.data}}",
        name=name,
        inputs={
            "data": Input(
                type="uri_folder", path="azureml://datastores/workspaceblobstore/paths/nowhere/"
            )
        },
    )
    ml.jobs.create_or_update(job)
    assert wait_done(ml, name).status == "Failed"
    assert "no data found" in run_details(fake, name)["error"]["error"]["message"]


def test_timeout_limit_fails_job(ml: MLClient, fake: Any) -> None:
    name = unique("timeout")
    job = make_job("sleep 60", name=name)
    job.set_limits(timeout=1)
    ml.jobs.create_or_update(job)
    assert wait_done(ml, name, timeout=30).status == "Failed"
    assert "timeout" in run_details(fake, name)["error"]["error"]["message"]


# --- faults ----------------------------------------------------------------------------------
def test_throttling_is_retried_by_the_client(ml: MLClient, fake: Any) -> None:
    name = unique("throttled")
    ml.jobs.create_or_update(make_job("true", name=name))
    set_fault(fake, kind="throttle", operation="Jobs_Get", count=2, retry_after=0)
    assert ml.jobs.get(name).name == name
    assert counters(fake)["Jobs_Get"] == 3  # two 429s, then the answer
    set_fault(fake, kind="throttle", operation="Jobs_Get", count=1, retry_after=7)
    raw = requests.get(f"{fake.url}{WS_PATH}/jobs/{name}?api-version=2023-04-01-preview", timeout=5)
    assert raw.status_code == 429 and raw.headers["Retry-After"] == "7"
    assert raw.json()["error"]["code"] == "TooManyRequests"


def test_persistent_throttling_surfaces_429(fake: Any) -> None:
    from azure.core.pipeline.policies import RetryPolicy

    client = MLClient(
        StaticToken(),
        SUB,
        RG,
        WS,
        cloud="StepopFakeCloud",
        cloud_metadata=azureml.cloud_metadata(fake.https_url),
        connection_verify=fake.ca_bundle,
        retry_policy=RetryPolicy(retry_total=2, retry_backoff_factor=0),
    )
    set_fault(fake, kind="throttle", operation="Jobs_Get", retry_after=0)
    with pytest.raises(HttpResponseError) as info:
        client.jobs.get("whatever")
    assert info.value.status_code == 429


def test_server_errors(ml: MLClient, fake: Any) -> None:
    set_fault(fake, kind="error", status=503, operation="Jobs_Get", count=1)
    raw = requests.get(f"{fake.url}{WS_PATH}/jobs/nope?api-version=2023-04-01-preview", timeout=5)
    assert raw.status_code == 503 and raw.json()["error"]["code"] == "ServiceUnavailable"
    set_fault(fake, kind="error", status=500, operation="Jobs_Get", count=1)
    with pytest.raises(ResourceNotFoundError):  # retried past the 500, then the real answer
        ml.jobs.get("nope")
    assert counters(fake)["Jobs_Get"] == 3


def test_injected_failure_reason(ml: MLClient, fake: Any) -> None:
    set_fault(fake, kind="job_failure", match="stockout", reason="Not enough quota for NCv3.")
    name = unique("stockout")
    ml.jobs.create_or_update(make_job("true", name=name))
    assert wait_done(ml, name).status == "Failed"
    error = run_details(fake, name)["error"]["error"]
    assert error == {"code": "ServiceError", "message": "Not enough quota for NCv3.", "details": []}


def test_injected_not_responding(ml: MLClient, fake: Any) -> None:
    name = unique("hung")
    set_fault(fake, kind="job_failure", match=name, status="NotResponding", reason="Node lost.")
    ml.jobs.create_or_update(make_job("true", name=name))
    wait_for(lambda: ml.jobs.get(name).status == "NotResponding", 30, "NotResponding")
    assert run_details(fake, name)["error"]["error"]["message"] == "Node lost."


def test_slow_provisioning(ml: MLClient, fake: Any) -> None:
    set_fault(fake, kind="provisioning_delay", seconds=1.0)
    name = unique("slow")
    start = time.monotonic()
    ml.jobs.create_or_update(make_job("true", name=name))
    wait_status(ml, name, "Preparing")
    assert wait_done(ml, name).status == "Completed"
    assert time.monotonic() - start >= 0.9


# --- capacity: Queued while no VM of the size is free, Failed for a spent vCPU quota ---------
STOCKOUT = (
    "Run requested 1 node(s).{} Instances of the specified VM size are not currently available. "
    "Please retry later, try reducing the VM size or number of instances, or try deploying to a "
    "different region"
)


def test_no_vm_of_the_size_holds_the_job_queued_until_cancelled(ml: MLClient, fake: Any) -> None:
    set_fault(fake, kind="capacity", machine="standard_nc6s_v3")  # VM sizes: any case
    name = unique("stockout")
    ml.jobs.create_or_update(make_job("true", name=name))
    warnings = wait_for(lambda: run_details(fake, name)["warnings"], 30, "the capacity warning")
    assert warnings == [{"source": "Compute", "message": STOCKOUT.format("")}]
    assert ml.jobs.get(name).status == "Queued"
    ml.jobs.begin_cancel(name).result(timeout=30)
    assert ml.jobs.get(name).status == "Canceled"
    assert "error" not in run_details(fake, name)


def test_a_low_priority_cluster_short_of_vms_runs_once_they_come_back(
    ml: MLClient, fake: Any
) -> None:
    set_fault(fake, kind="capacity", machine="Standard_NC6s_v3", seconds=0.5, count=1)
    name = unique("lowpri")
    ml.jobs.create_or_update(make_job("true", name=name, compute="lowpri-gpu-cluster"))
    assert wait_done(ml, name).status == "Completed"
    (warning,) = run_details(fake, name)["warnings"]
    cluster = " 'lowpri-gpu-cluster' cluster has encountered error(s)."
    assert warning["message"].startswith(STOCKOUT.format(cluster))
    assert "in low priority is currently out of capacity" in warning["message"]


def test_a_spent_vcpu_quota_fails_the_job(ml: MLClient, fake: Any) -> None:
    from azure.ai.ml.exceptions import JobException

    set_fault(fake, kind="capacity", machine="Standard_NC6s_v3", at="provision", region="eastus",
              count=1)  # fmt: skip
    name = unique("quota")
    ml.jobs.create_or_update(make_job("true", name=name))
    assert wait_done(ml, name).status == "Failed"
    error = run_details(fake, name)["error"]["error"]
    assert error["code"] == "UserError"
    assert error["message"].startswith(
        "Job submission to AzureML Compute encountered an Exception with status code "
        "JobNodeCountExceedsCoreQuota, The specified subscription has a vCPU quota of 0 for "
        "Standard_NC6s_v3 and is less than the requested job node count of 1."
    )
    with pytest.raises(JobException) as info:
        ml.jobs.stream(name)
    assert "JobNodeCountExceedsCoreQuota" in str(info.value)
    after = unique("quota")  # count 1: the next job on the size runs
    ml.jobs.create_or_update(make_job("true", name=after))
    assert wait_done(ml, after).status == "Completed"


def test_capacity_rules_for_another_size_or_region_leave_the_job_alone(
    ml: MLClient, fake: Any
) -> None:
    set_fault(fake, kind="capacity", machine="Standard_NC6s_v3", region="westeurope")
    set_fault(fake, kind="capacity", machine="Standard_DS3_v2", at="provision")
    name = unique("elsewhere")
    ml.jobs.create_or_update(make_job("true", name=name))
    assert wait_done(ml, name).status == "Completed"
    assert run_details(fake, name)["warnings"] == []
    refused = {"kind": "capacity", "machine": "Standard_NC6s_v3", "at": "create"}
    resp = requests.post(f"{fake.url}/_fake/faults", json=refused, timeout=5)
    assert resp.status_code == 400 and "queue" in resp.json()["error"]


SPOT_CMD = (
    'python -c "import os, sys, time\n'
    "p = os.path.join(os.environ['AZUREML_CR_EXECUTION_WORKING_DIR_PATH'], '..', 'attempt')\n"
    "first = not os.path.exists(p)\n"
    "open(p, 'a').write('x')\n"
    "print('first attempt' if first else 'resumed', flush=True)\n"
    'time.sleep(60 if first else 0)"'
)


def test_a_preempted_spot_attempt_restarts_and_resumes(ml: MLClient, fake: Any) -> None:
    # The rule comes once the first attempt has written its marker (a rule given before the
    # job could preempt it before that, on a loaded machine, and the next attempt would be a
    # first one again): preempt rules are checked all along a running attempt.
    name = unique("spot-late-rule")
    job = make_job(SPOT_CMD, name=name)
    job.queue_settings = QueueSettings(job_tier="spot")
    ml.jobs.create_or_update(job)
    wait_for(lambda: "first attempt" in logs(fake, name), 60, "the first attempt")
    assert ml.jobs.get(name).status == "Running"
    set_fault(fake, kind="preempt", match=name, after_seconds=0)
    done = wait_done(ml, name, timeout=60)
    assert done.status == "Completed", run_details(fake, name).get("error")
    text = logs(fake, name)
    assert "preempted" in text and "resumed" in text


def test_preemption_of_dedicated_job_fails(ml: MLClient, fake: Any) -> None:
    name = unique("dedicated")
    set_fault(fake, kind="preempt", match=name, after_seconds=0.3)
    ml.jobs.create_or_update(make_job("sleep 60", name=name))
    assert wait_done(ml, name, timeout=60).status == "Failed"
    assert "preempted" in run_details(fake, name)["error"]["error"]["message"]


def test_delayed_logs(ml: MLClient, fake: Any) -> None:
    set_fault(fake, kind="log_delay", seconds=3600)
    name = unique("latelog")
    ml.jobs.create_or_update(make_job("echo late line", name=name))
    wait_done(ml, name)
    assert "late line" not in logs(fake, name)
    assert "user_logs/std_log.txt" not in run_details(fake, name)["logFiles"]
    clear_faults(fake)
    assert "late line" in logs(fake, name)
    assert "user_logs/std_log.txt" in run_details(fake, name)["logFiles"]


# --- refusals --------------------------------------------------------------------------------
def _serverless(instance_type: str) -> Callable[[Any], None]:
    def mutate(job: Any) -> None:
        job.resources = JobResourceConfiguration(instance_type=instance_type, instance_count=1)

    return mutate


CLIENT_REFUSALS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "unknown instance type": (_serverless("Standard_NC7_v9"), "instance type 'Standard_NC7_v9'"),
    "gpu name as instance type": (_serverless("V100"), "not supported"),
    "unknown compute": (lambda j: setattr(j, "compute", "no-such-cluster"), "no-such-cluster"),
    "unknown datastore": (
        lambda j: make_job(
            "ls ${{inputs.data}}",
            inputs={"data": Input(type="uri_folder", path="azureml://datastores/nostore/paths/x/")},
        ),
        "Datastore 'nostore'",
    ),
}


@pytest.mark.parametrize("case", sorted(CLIENT_REFUSALS))
def test_refusals_through_the_client(ml: MLClient, case: str) -> None:
    mutate, needle = CLIENT_REFUSALS[case]
    job = make_job("true")
    job = mutate(job) or job
    with pytest.raises(HttpResponseError) as info:
        ml.jobs.create_or_update(job, skip_validation=True)
    assert info.value.status_code == 400
    assert info.value.error.code == "UserError"
    assert needle in info.value.error.message, info.value.error.message


def _props(ml: MLClient, **extra: Any) -> dict[str, Any]:
    props: dict[str, Any] = {
        "jobType": "Command",
        "command": "true",
        "environmentId": env_id(ml),
        "resources": {"instanceType": "Standard_DS3_v2", "instanceCount": 1},
    }
    props.update(extra)
    return {k: v for k, v in props.items() if v is not None}


RAW_REFUSALS: dict[str, tuple[str, dict[str, Any], str, str]] = {
    # case: (job name, property overrides, error code, message fragment)
    "name starts with dash": ("-bad", {}, "UserError", "Job name '-bad' is invalid"),
    "name with dot": ("bad.name", {}, "UserError", "is invalid"),
    "name over 255": ("a" * 256, {}, "UserError", "at most 255"),
    "missing command": ("ok-name", {"command": None}, "ValidationError", "'command'"),
    "missing environment": ("ok-name", {"environmentId": None}, "ValidationError", "environmentId"),
    "unknown environment": (
        "ok-name",
        {"environmentId": f"azureml:{WS_PATH}/environments/nope/versions/1"},
        "UserError",
        "was not found",
    ),
    "bad job type": ("ok-name", {"jobType": "Batch"}, "ValidationError", "jobType"),
    "bad job tier": (
        "ok-name",
        {"queueSettings": {"jobTier": "Cheap"}},
        "ValidationError",
        "Cheap",
    ),
    "bad distribution": (
        "ok-name",
        {"distribution": {"distributionType": "Horovod"}},
        "ValidationError",
        "Horovod",
    ),
    "bad input mode": (
        "ok-name",
        {
            "inputs": {
                "d": {
                    "jobInputType": "uri_folder",
                    "uri": "azureml://datastores/workspaceblobstore/paths/x/",
                    "mode": "Mount",
                }
            }
        },
        "ValidationError",
        "invalid mode 'Mount'",
    ),  # fmt: skip
    "bad timeout": (
        "ok-name",
        {"limits": {"jobLimitsType": "Command", "timeout": "1h"}},
        "ValidationError",
        "ISO 8601",
    ),  # fmt: skip
    "zero instances": (
        "ok-name",
        {"resources": {"instanceType": "Standard_DS3_v2", "instanceCount": 0}},
        "UserError",
        "instanceCount",
    ),
    "bad experiment name": ("ok-name", {"experimentName": "my exp"}, "UserError", "Experiment"),
    "undefined input in command": (
        "ok-name",
        {"command": "cat ${{inputs.missing}}"},
        "UserError",
        "inputs.missing",
    ),
    "bad env var name": (
        "ok-name",
        {"environmentVariables": {"1X": "v"}},
        "UserError",
        "Environment variable name",
    ),
}


@pytest.mark.parametrize("case", sorted(RAW_REFUSALS))
def test_refusals_over_raw_arm(ml: MLClient, fake: Any, case: str) -> None:
    name, overrides, code, needle = RAW_REFUSALS[case]
    props = _props(ml)
    for key, val in overrides.items():
        if val is None:
            props.pop(key, None)
        else:
            props[key] = val
    resp = put_raw(fake, name if name != "ok-name" else unique("raw"), props)
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["code"] == code and needle in err["message"], err


def test_environment_refusals(fake: Any) -> None:
    url = f"{fake.url}{WS_PATH}/environments/e1/versions/1?api-version=2023-04-01-preview"
    assert requests.put(url, json={"properties": {}}, timeout=5).status_code == 400
    ok = requests.put(url, json={"properties": {"image": IMAGE}}, timeout=5)
    assert ok.status_code in (200, 201)
    changed = requests.put(url, json={"properties": {"image": "other:1"}}, timeout=5)
    assert changed.status_code == 400 and "immutable" in changed.json()["error"]["message"]


def test_unknown_job_is_not_found(ml: MLClient) -> None:
    with pytest.raises(ResourceNotFoundError):
        ml.jobs.get("no-such-job")


# --- one real container --------------------------------------------------------------------
def _engine_has(image: str) -> bool:
    try:
        import docker

        engine = docker.from_env(timeout=5)
        engine.ping()
        try:
            engine.images.get(image)
        except Exception:
            repo, tag = image.rsplit(":", 1)
            engine.images.pull(repo, tag=tag)
        return True
    except Exception:
        return False


@pytest.mark.container
def test_container_mode_job(ml: MLClient, blobs: BlobServiceClient) -> None:
    if not _engine_has(IMAGE):
        pytest.skip("no container engine (or no base image in the local registry)")
    base = unique("ctr")
    blobs.get_blob_client(CONTAINER, f"{base}/in/a.txt").upload_blob(b"from azurite\n")
    name = unique("container")
    job = make_job(
        "python3 -c \"import sys; print(open(sys.argv[1] + '/a.txt').read().upper())\" "
        "${{inputs.data}} > ${{outputs.out}}/upper.txt",
        name=name,
        inputs={
            "data": Input(
                type="uri_folder", path=f"azureml://datastores/workspaceblobstore/paths/{base}/in/"
            )
        },
        outputs={"out": Output(type="uri_folder")},
        tags={"stepop_fake_mode": "container"},
    )
    ml.jobs.create_or_update(job)
    assert wait_done(ml, name, timeout=180).status == "Completed"
    got = blobs.get_blob_client(CONTAINER, f"azureml/{name}/out/upper.txt").download_blob()
    assert got.readall().strip() == b"FROM AZURITE"


@pytest.mark.container
def test_a_failing_build_of_the_environment_fails_the_job_in_process_mode_with_its_reason(
    ml: MLClient, blobs: BlobServiceClient, fake: Any
) -> None:
    """Azure ML builds an environment's build context for any job that uses it (not only in
    container mode); the job fails with the build's error and the last lines of its log."""
    if not _engine_has(IMAGE):
        pytest.skip("no container engine (or no base image in the local registry)")
    assert requests.get(f"{fake.url}/_fake/mode", timeout=5).json()["mode"] == "process"
    context = unique("ctx")
    dockerfile = f"FROM {IMAGE}\nRUN echo checking the requirements && exit 3\n"
    blobs.get_blob_client(CONTAINER, f"{context}/Dockerfile").upload_blob(dockerfile.encode())
    version = f"{WS_PATH}/environments/selftest-build/versions/{context}"
    build = {
        "contextUri": f"azureml://datastores/workspaceblobstore/paths/{context}/",
        "dockerfilePath": "Dockerfile",
    }
    put = requests.put(
        f"{fake.url}{version}?api-version=2023-04-01-preview",
        json={"properties": {"build": build}},
        timeout=5,
    )
    assert put.status_code == 201, put.text
    name = unique("build-fails")
    assert put_raw(fake, name, _props(ml, environmentId=f"azureml:{version}")).status_code == 201
    assert wait_done(ml, name, timeout=120).status == "Failed"
    error = run_details(fake, name)["error"]["error"]
    assert error["code"] == "ImageBuildFailure"
    assert "returned a non-zero code: 3" in error["message"]
    assert "checking the requirements" in error["message"]  # the tail of the build's log
    assert "Step 2/2 : RUN echo checking the requirements" in logs(fake, name)


# --- the fake as `make cloud-up` runs it ---------------------------------------------------------
def test_stack_fake_runs_a_job(cloud_stack: dict[str, str]) -> None:
    """What a new user does with only .cloud/env: the stack's fake, Azurite, MLClient."""
    url = cloud_stack.get("STEPOP_AZUREML_HTTPS_ENDPOINT")
    if not url:
        pytest.skip("the stack runs no Azure ML fake")
    client = MLClient(
        StaticToken(),
        cloud_stack["STEPOP_AZUREML_SUBSCRIPTION"],
        cloud_stack["STEPOP_AZUREML_RESOURCE_GROUP"],
        cloud_stack["STEPOP_AZUREML_WORKSPACE"],
        cloud="StepopStackCloud",
        cloud_metadata=azureml.cloud_metadata(url),
        connection_verify=cloud_stack["STEPOP_AZUREML_CA_BUNDLE"],
    )
    name = unique("stack")
    job = make_job("echo hi from the stack > ${{outputs.out}}/hello.txt", name=name,
                   outputs={"out": Output(type="uri_folder")})  # fmt: skip
    client.jobs.create_or_update(job)
    assert wait_done(client, name).status == "Completed"
    service = BlobServiceClient.from_connection_string(
        cloud_stack["AZURE_STORAGE_CONNECTION_STRING"]
    )
    blob = service.get_blob_client(CONTAINER, f"azureml/{name}/out/hello.txt")
    assert blob.download_blob().readall() == b"hi from the stack\n"
