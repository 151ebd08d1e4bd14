"""The Azure ML job request, states and billing, built without any API call."""

from __future__ import annotations

import hashlib
import shlex

import pytest

from airflow_stepop.backends.azureml.backend import AzureMLBackend, is_transient_error
from airflow_stepop.backends.azureml.compute import named_cluster
from airflow_stepop.backends.azureml.config import AzureMLJobConfig
from airflow_stepop.backends.azureml.errors import AzureMLConfigError
from airflow_stepop.backends.azureml.launch import (
    billing_facts,
    blob_url,
    build_launch,
    job_body,
    launch_bytes,
    map_status,
)
from airflow_stepop.backends.base import JobRequest
from airflow_stepop.backends.bootstrap import BOOTSTRAP, LOADER

ENTRY = b"print('the entry script')\n"
ROOT = "abfs://data/stepop"
RUN = f"{ROOT}/dag/run/task/-1/1"


def request(**kwargs) -> JobRequest:
    return JobRequest(
        job_name="dag-task-0123456789-t1",
        task_key="dag/run/task/-1",
        spec_uri=f"{RUN}/spec.json",
        run_uri=RUN,
        code_uri=f"{ROOT}/code/abc.zip",
        labels={"dag_id": "dag", "task_id": "task"},
        code_sha256="abc",
        **kwargs,
    )


def ref(uri: str) -> dict:
    return {"ref": {"uri": uri, "sha256": "0" * 64}}


def test_abfs_and_az_uris_become_blob_urls_the_job_can_mount():
    assert blob_url("abfs://data/a/b", "acct") == "https://acct.blob.core.windows.net/data/a/b"
    assert blob_url("az://data/a/b", "acct") == "https://acct.blob.core.windows.net/data/a/b"
    # Airflow's form: the connection before @, then the container
    assert (
        blob_url("abfs://wasb_conn@data/a", "acct") == "https://acct.blob.core.windows.net/data/a"
    )
    assert (
        blob_url("abfss://data@other.dfs.core.windows.net/a", "acct")
        == "https://other.blob.core.windows.net/data/a"
    )
    with pytest.raises(AzureMLConfigError, match="abfs://, az:// or azureml://datastores/"):
        blob_url("s3://bucket/x", "acct")
    with pytest.raises(AzureMLConfigError, match="storage account"):
        blob_url("abfs://data/x", None)


def test_the_launch_maps_code_run_upstream_inputs_and_the_result_output():
    spec = {
        "args": [ref(f"{ROOT}/dag/run/up/-1/1/up-job/result/outputs/return_value.npy")],
        "kwargs": {"model": ref(f"{ROOT}/dag/run/fit/-1/1/fit-job/result/outputs/model"),
                   "staged": ref(f"{RUN}/inputs/x.pkl")},
    }  # fmt: skip
    inputs, outputs, launch, command, output_uri = build_launch(
        request(), spec, "acct", entry_source=ENTRY
    )
    blob = "https://acct.blob.core.windows.net/data/stepop"
    assert inputs["code"] == {"jobInputType": "uri_file", "uri": f"{blob}/code/abc.zip",
                              "mode": "Download"}  # fmt: skip
    assert inputs["run"]["uri"] == f"{blob}/dag/run/task/-1/1/"
    assert sorted(i["uri"] for n, i in inputs.items() if n.startswith("in")) == [
        f"{blob}/dag/run/fit/-1/1/fit-job/result/outputs/",
        f"{blob}/dag/run/up/-1/1/up-job/result/outputs/",
    ]  # the staged input travels in the run directory
    assert output_uri == f"{RUN}/dag-task-0123456789-t1/result"
    result = f"{blob}/dag/run/task/-1/1/dag-task-0123456789-t1/result/"
    assert outputs["result"] == {"jobOutputType": "uri_folder", "mode": "Upload", "uri": result}
    assert launch["path_map"][f"{ROOT}/code/abc.zip"] == "code"
    assert launch["path_map"][output_uri] == "result"
    # the bootstrap checks the entry script, launch document and bundle, then runs the entry
    words = shlex.split(command)
    assert words[:4] == ["python3", "-I", "-c", LOADER]
    assert words[4:13] == [
        "stepop_entry.py", "${{inputs.run}}/stepop_entry.py", hashlib.sha256(ENTRY).hexdigest(),
        "stepop_launch.json", "${{inputs.run}}/stepop_launch.json",
        hashlib.sha256(launch_bytes(launch)).hexdigest(),
        "code.zip", "${{inputs.code}}", "abc",
    ]  # fmt: skip
    assert words[13:17] == ["--", "stepop_entry.py", "stepop_launch.json", "code=${{inputs.code}}"]
    assert "result=${{outputs.result}}" in words


def test_under_a_datastore_root_the_job_names_its_data_as_datastore_paths():
    spec = {"args": [ref(f"{ROOT}/dag/run/up/-1/1/up-job/result/outputs/return_value.npy")],
            "kwargs": {"other": ref("abfs://elsewhere/x/result/outputs/v.npy")}}  # fmt: skip
    datastore = ("abfs://data", "azureml://datastores/workspaceblobstore/paths")
    inputs, outputs, launch, _, output_uri = build_launch(
        request(), spec, "acct", datastore, entry_source=ENTRY
    )
    paths = "azureml://datastores/workspaceblobstore/paths/stepop"
    assert inputs["code"]["uri"] == f"{paths}/code/abc.zip"
    assert inputs["run"]["uri"] == f"{paths}/dag/run/task/-1/1/"
    assert sorted(i["uri"] for n, i in inputs.items() if n.startswith("in")) == [
        f"{paths}/dag/run/up/-1/1/up-job/result/outputs/",
        "https://acct.blob.core.windows.net/elsewhere/x/result/outputs/",  # another container
    ]
    assert outputs["result"]["uri"] == f"{paths}/dag/run/task/-1/1/dag-task-0123456789-t1/result/"
    assert outputs["checkpoints"]["uri"] == f"{paths}/dag/run/task/-1/checkpoints/"
    # the runtime still reads and writes the worker's URIs (mapped to the job's paths)
    assert launch["path_map"][output_uri] == "result" and output_uri.startswith(ROOT + "/")


def test_every_job_mounts_the_checkpoints_shared_by_every_try():
    """Not only a Spot job's: a retry resumes too, and a step reads $STEPOP_CHECKPOINT_DIR on
    every cloud (it was unset here without spot, and set on Vertex AI)."""
    _, outputs, launch, command, _ = build_launch(request(), {}, "acct", entry_source=ENTRY)
    assert outputs["checkpoints"] == {
        "jobOutputType": "uri_folder",
        "uri": "https://acct.blob.core.windows.net/data/stepop/dag/run/task/-1/checkpoints/",
        "mode": "ReadWriteMount",
    }
    assert (
        launch["checkpoints"] == "checkpoints" and "checkpoints=${{outputs.checkpoints}}" in command
    )


def test_the_job_body_carries_every_setting():
    job = AzureMLJobConfig(
        instance_type="Standard_NC6s_v3", instance_count=2, processes_per_instance=4,
        job_tier="Spot", max_runtime_s=3600, experiment_name="exp",
        identity={"identityType": "UserIdentity"}, shm_size="16g",
    )  # fmt: skip
    body = job_body(
        request(environment={"A": "1"}), job, environment_id="env", compute_id=None, inputs={},
        outputs={}, command="cmd", properties={"p": "1"}, tags={"t": "1"},
    )["properties"]  # fmt: skip
    assert body["resources"] == {"instanceCount": 2, "instanceType": "Standard_NC6s_v3",
                                 "shmSize": "16g"}  # fmt: skip
    assert body["distribution"] == {"distributionType": "PyTorch", "processCountPerInstance": 4}
    assert body["queueSettings"] == {"jobTier": "Spot"}
    assert body["limits"] == {"jobLimitsType": "Command", "timeout": "PT3600S"}
    assert body["identity"] == {"identityType": "UserIdentity"}
    assert body["environmentVariables"] == {
        "A": "1", "PYTHONUNBUFFERED": "1", "STEPOP_BOOTSTRAP": BOOTSTRAP,
    }  # fmt: skip
    assert body["experimentName"] == "exp" and body["displayName"] == "task"
    single = job_body(
        request(), AzureMLJobConfig(), environment_id="env", compute_id="c", inputs={},
        outputs={}, command="c", properties={}, tags={},
    )["properties"]  # fmt: skip
    assert "distribution" not in single and "queueSettings" not in single
    assert "identity" not in single and single["computeId"] == "c"


@pytest.mark.parametrize(
    ("status", "state"),
    [
        ("NotStarted", "pending"), ("Queued", "pending"), ("Preparing", "pending"),
        ("Running", "running"), ("Finalizing", "running"), ("CancelRequested", "running"),
        ("Completed", "succeeded"), ("Failed", "failed"), ("Canceled", "stopped"),
        ("NotResponding", "failed"), ("Paused", "failed"),
    ],
)  # fmt: skip
def test_statuses_map_to_step_states_and_paused_is_never_success(status, state):
    assert map_status(status).state == state


def test_a_failure_carries_the_services_code_and_message():
    status = map_status("Failed", {"code": "QuotaExceeded", "message": "no cores left"})
    assert status.reason == "QuotaExceeded: no cores left"
    assert "NotResponding" in map_status("NotResponding").reason


def test_a_user_errors_quote_of_the_log_is_left_to_the_failure_messages_log_tail():
    message = (
        "Execution failed. User process '/bin/bash' exited with status code 1. Please check "
        "log file 'user_logs/std_log.txt' for error details. Error:   File \"x.py\", line 3\n"
        "ValueError: bad value 42\nValueError: bad value 42"
    )
    status = map_status("Failed", {"code": "UserError", "message": message})
    assert status.reason == (
        "UserError: Execution failed. User process '/bin/bash' exited with status code 1. "
        "Please check log file 'user_logs/std_log.txt' for error details."
    )


def test_only_jobs_the_service_still_holds_are_cancelled_when_they_fail():
    assert map_status("NotResponding").held and map_status("Paused").held
    assert not map_status("Failed").held


def test_billing_counts_run_seconds_instances_and_the_spot_price():
    resource = {
        "name": "job-1",
        "properties": {
            "resources": {"instanceType": "Standard_NC6s_v3", "instanceCount": 2},
            "queueSettings": {"jobTier": "Spot"},
            "properties": {},
        },
    }
    details = {"startTimeUtc": "2026-01-01T00:00:00Z", "endTimeUtc": "2026-01-01T01:00:00Z"}
    facts = billing_facts(resource, details)
    assert facts["run_seconds"] == 3600
    billing = AzureMLBackend().billing(facts)
    assert billing["machine"] == "Standard_NC6s_v3" and billing["count"] == 2
    assert billing["spot"] is True and billing["price_per_hour_usd"] == 0.612
    assert billing["estimated_cost_usd"] == pytest.approx(2 * 0.612)
    assert AzureMLBackend().billing({**facts, "run_seconds": 0}) is None


def test_a_job_on_a_low_priority_cluster_is_billed_at_the_low_priority_price():
    props = {"resources": {"instanceType": "Standard_NC6s_v3", "instanceCount": 1},
             "properties": {"stepop_vm_priority": "LowPriority"}}  # fmt: skip
    details = {"startTimeUtc": "2026-01-01T00:00:00Z", "endTimeUtc": "2026-01-01T01:00:00Z"}
    billing = AzureMLBackend().billing(billing_facts({"name": "j", "properties": props}, details))
    assert billing["spot"] is True and billing["price_per_hour_usd"] == 0.612
    props["properties"]["stepop_vm_priority"] = "Dedicated"
    billing = AzureMLBackend().billing(billing_facts({"name": "j", "properties": props}, details))
    assert billing["spot"] is False and billing["price_per_hour_usd"] > 0.612


def test_throttling_server_errors_and_network_errors_are_transient():
    from azure.core.exceptions import HttpResponseError, ServiceRequestError

    class Answer:
        def __init__(self, status):
            self.status_code, self.reason, self.headers = status, "x", {}

        def text(self):
            return ""

    assert is_transient_error(HttpResponseError(response=Answer(429)))
    assert is_transient_error(HttpResponseError(response=Answer(503)))
    assert not is_transient_error(HttpResponseError(response=Answer(400)))
    assert is_transient_error(ServiceRequestError("connection reset"))
    assert not is_transient_error(ValueError("x"))


@pytest.fixture
def gov_backend(monkeypatch):
    import json

    extra = {"subscription_id": "sub-1", "resource_group": "rg", "workspace_name": "ws",
             "tenant_id": "t", "endpoint": "https://management.usgovcloudapi.net"}  # fmt: skip
    conn = {"conn_type": "azure_ml", "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_AML_GOV", json.dumps(conn))
    return AzureMLBackend("aml_gov")


def test_a_sovereign_workspaces_jobs_read_its_clouds_blob_storage(gov_backend):
    suffix = gov_backend.workspace.cloud.storage_suffix
    inputs, outputs, *_ = build_launch(request(), {}, "acct", None, suffix, entry_source=ENTRY)
    urls = [v["uri"] for v in (*inputs.values(), *outputs.values())]
    gov_blob = "https://acct.blob.core.usgovcloudapi.net/data/"
    assert urls and all(u.startswith(gov_blob) for u in urls)


def test_a_sovereign_workspaces_links_open_its_studio_and_no_emulator_log(gov_backend):
    handle = {"job_id": "j1", "experiment": "exp", "studio_url": "https://ml.azure.us/runs/j1"}
    links = gov_backend.links(handle)
    assert set(links) == {"job", "experiment"}
    assert links["job"].startswith("https://ml.azure.us/runs/j1?wsid=/subscriptions/sub-1/")
    assert links["experiment"].startswith("https://ml.azure.us/experiments/exp?")


@pytest.mark.parametrize(
    ("vm_size", "refused"),
    [("Standard_HB120rs_v3", True), ("standard_nd96isr_h200_v5", False)],
)
def test_a_named_cluster_of_a_size_without_gpus_is_refused_for_a_gpu_request(vm_size, refused):
    """A cluster's size the catalog does not list is still known to lack GPUs outside the N
    series: the step must not run on CPUs while its resources ask for a GPU."""
    from types import SimpleNamespace

    from airflow_stepop.backends.azureml.errors import AzureMLConfigError
    from airflow_stepop.catalog import load
    from airflow_stepop.settings import ResourceSettings

    assert (
        load("airflow_stepop.backends.azureml").get(vm_size) is None
    )  # pick others if these are added

    class Arm:  # the workspace's compute, as ARM describes a cluster
        def get(self, path):
            return {"properties": {"properties": {"vmSize": vm_size, "vmPriority": "Dedicated"}}}

    workspace = SimpleNamespace(path="/ws", name="stepop-ws")
    job = AzureMLJobConfig.from_arguments(
        "AzureMLStepOperator",
        image_uri="myregistry.azurecr.io/train:1.0",
        compute="the-cluster",
        resources=ResourceSettings(gpu_count=1),
    )
    if not refused:
        assert named_cluster(Arm(), workspace, job)[0].instance_type == vm_size  # taken as given
        return
    with pytest.raises(AzureMLConfigError) as err:
        named_cluster(Arm(), workspace, job)
    assert f"compute='the-cluster' runs {vm_size} VMs, which have no GPU" in str(err.value)
