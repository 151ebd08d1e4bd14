"""The CustomJob of a step (request body, labels, billing), its states and the entry script."""

from __future__ import annotations

import hashlib
import json

import pytest

from airflow_stepop.backends.base import JobRequest
from airflow_stepop.backends.bootstrap import LOADER
from airflow_stepop.backends.vertex import entry as vertex_entry
from airflow_stepop.backends.vertex.api import is_transient_error, map_state
from airflow_stepop.backends.vertex.config import VertexJobConfig
from airflow_stepop.backends.vertex.job import VertexConfigError, billing, build_job
from airflow_stepop.catalog import load
from cloud.vertex.catalog import check_machine
from cloud.vertex.validation import validate_custom_job

RUN = "gs://bucket/root/dag/run/task/-1/1"
REQUEST = JobRequest(
    job_name="dag-task-0123456789-t1",
    task_key="dag/run/task/-1",
    spec_uri=f"{RUN}/spec.json",
    run_uri=RUN,
    code_uri="gs://bucket/root/code/abc.zip",
    environment={"MY_SETTING": "x"},
    spec_sha256="f" * 64,
    code_sha256="abc",
    labels={"dag_id": "My_Dag", "task_id": "task", "run_id": "run", "map_index": "-1"},
)
ENTRY = b"print('the entry script')\n"
SPEC = {"args": [{"ref": {"uri": "gs://other/data/x.npy"}}], "kwargs": {}}


def _job(**kwargs):
    return VertexJobConfig(machine_type="n1-standard-4", image_uri="img", **kwargs)


def test_the_job_reads_every_bucket_through_the_gcs_mount_and_passes_vertex_checks():
    body = build_job(
        REQUEST, SPEC, _job(spot=True, replica_count=3), "img", "p", "us-central1", ENTRY
    )
    pools = body["job_spec"]["worker_pool_specs"]
    assert [p["replica_count"] for p in pools] == [1, 2]  # Vertex: pool 0 has exactly one
    container = pools[0]["container_spec"]
    # the bootstrap checks the entry script and the code bundle, read through the FUSE mount
    assert container["command"][:4] == ["python3", "-I", "-c", LOADER]
    assert container["command"][4:] == [
        "stepop_vertex_entry.py",
        "/gcs/bucket/root/dag/run/task/-1/1/stepop_vertex_entry.py",
        hashlib.sha256(ENTRY).hexdigest(),
        "code.zip",
        "/gcs/bucket/root/code/abc.zip",
        "abc",
        "--",
        "stepop_vertex_entry.py",
    ]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert json.loads(env["STEPOP_PATH_MAP"]) == {
        "gs://bucket": "/gcs/bucket",
        "gs://other": "/gcs/other",
    }
    assert env["STEPOP_SPEC_SHA256"] == "f" * 64 and env["MY_SETTING"] == "x"
    # checkpoints (AIP_CHECKPOINT_DIR) live under the task instance, shared by its tries
    assert body["job_spec"]["base_output_directory"]["output_uri_prefix"] == RUN.rsplit("/", 1)[0]
    assert body["job_spec"]["scheduling"]["strategy"] == "SPOT"
    assert body["labels"]["stepop"] == "step" and body["labels"]["airflow_dag_id"] == "my_dag"
    assert body["labels"]["stepop_try"] == "1" and body["labels"]["airflow_run_id"] == "run"
    assert body["labels"]["airflow_map_index"] == "-1"
    # what the fake checks as Vertex does (labels, pools, durations), in REST field names
    from google.cloud import aiplatform_v1

    job = aiplatform_v1.CustomJob(body)
    validate_custom_job(
        json.loads(aiplatform_v1.CustomJob.to_json(job, use_integers_for_enums=False))
    )


def test_the_users_labels_never_replace_ours_and_all_of_them_fit_vertexs_64():
    from google.cloud import aiplatform_v1

    from airflow_stepop.backends.vertex.config import USER_LABELS_MAX

    # a config made without the parse-time check still cannot take our keys
    labels = {"stepop_task": "x", "airflow_dag_id": "y", "team": "ml"}
    body = build_job(REQUEST, SPEC, _job(labels=labels), "img", "p", "l", ENTRY)
    assert body["labels"]["stepop_task"] != "x" and body["labels"]["airflow_dag_id"] == "my_dag"
    assert body["labels"]["team"] == "ml"
    most = {f"k{i}": "v" for i in range(USER_LABELS_MAX)}
    body = build_job(REQUEST, SPEC, _job(labels=most), "img", "p", "l", ENTRY)
    assert len(body["labels"]) == 64  # the most Vertex takes, which the fake checks
    validate_custom_job(
        json.loads(
            aiplatform_v1.CustomJob.to_json(aiplatform_v1.CustomJob(body),
                                            use_integers_for_enums=False)
        )
    )  # fmt: skip
    with pytest.raises(VertexConfigError, match="65 labels, 7 of them ours.*at most 57"):
        build_job(REQUEST, SPEC, _job(labels={**most, "one_more": "v"}), "img", "p", "l", ENTRY)


def test_a_step_input_outside_gcs_is_refused_before_submitting():
    spec = {"args": [{"ref": {"uri": "s3://bucket/x.npy"}}]}
    with pytest.raises(VertexConfigError, match="gs:// artifact_root"):
        build_job(REQUEST, spec, _job(), "img", "p", "us-central1", ENTRY)


def test_experiment_and_options_reach_the_request():
    job = _job(
        experiment="churn",
        service_account="sa@p.iam.gserviceaccount.com",
        network="projects/1/global/networks/v",
        encryption_key="projects/p/locations/l/keyRings/r/cryptoKeys/k",
        persistent_resource_id="warm",
        accelerator_type="NVIDIA_TESLA_T4",
        accelerator_count=2,
        boot_disk_size_gb=200,
        max_runtime_s=600,
        restart_on_worker_restart=True,
    )
    body = build_job(REQUEST, SPEC, job, "img", "p", "us-central1", ENTRY)
    spec = body["job_spec"]
    assert (
        spec["experiment"]
        == "projects/p/locations/us-central1/metadataStores/default/contexts/churn"
    )
    # no experiment_run: that context would have to exist; Vertex makes the job's run itself
    assert "experiment_run" not in spec
    assert spec["persistent_resource_id"] == "warm" and spec["network"].endswith("/networks/v")
    assert body["encryption_spec"] == {"kms_key_name": job.encryption_key}
    assert spec["scheduling"] == {"timeout": "600s", "restart_job_on_worker_restart": True}
    pool = spec["worker_pool_specs"][0]
    assert pool["machine_spec"]["accelerator_count"] == 2
    assert pool["disk_spec"]["boot_disk_size_gb"] == 200


def test_billing_is_run_time_times_replicas_times_the_catalog_price():
    details = {
        "job_name": "j", "machine_type": "n1-standard-4", "accelerator_type": "NVIDIA_TESLA_T4",
        "accelerator_count": 1, "replica_count": 2, "spot": False,
        "start_time": "2026-11-22T10:00:00.000000Z", "end_time": "2026-11-22T10:30:00.500000000Z",
    }  # fmt: skip
    price = (
        load("airflow_stepop.backends.vertex").get("n1-standard-4+NVIDIA_TESLA_T4x1").price_per_hour
    )
    out = billing(details)
    # seconds of one replica, as SageMaker's and Azure ML's: the log line multiplies by count
    assert out["billable_seconds"] == 1800.5 and out["count"] == 2
    assert out["estimated_cost_usd"] == round(price / 3600 * 1800.5 * 2, 6)
    spot = billing({**details, "spot": True})
    assert spot["price_per_hour_usd"] < price
    assert billing({**details, "start_time": None}) is None  # never ran: nothing billed


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("JOB_STATE_QUEUED", "pending"),
        ("JOB_STATE_PENDING", "pending"),
        ("JOB_STATE_RUNNING", "running"),
        ("JOB_STATE_CANCELLING", "running"),
        ("JOB_STATE_SUCCEEDED", "succeeded"),
        ("JOB_STATE_CANCELLED", "stopped"),
        ("JOB_STATE_FAILED", "failed"),
        ("JOB_STATE_PAUSED", "failed"),
        ("JOB_STATE_EXPIRED", "failed"),
        ("JOB_STATE_PARTIALLY_SUCCEEDED", "failed"),
    ],
)
def test_paused_and_expired_are_never_success(state, expected):
    assert map_state(state, "boom").state == expected


def test_only_a_paused_job_is_a_failure_the_service_still_holds():
    assert map_state("JOB_STATE_PAUSED", None).held  # cancelled when the step fails
    assert not map_state("JOB_STATE_FAILED", "boom").held


def test_the_failure_reason_carries_the_jobs_error_message():
    assert map_state("JOB_STATE_FAILED", "stockout").reason == "JOB_STATE_FAILED: stockout"


def test_throttling_5xx_and_connection_errors_are_transient():
    from google.api_core import exceptions

    assert is_transient_error(exceptions.TooManyRequests("slow down"))
    assert is_transient_error(exceptions.ServiceUnavailable("later"))
    assert is_transient_error(ConnectionResetError())
    assert not is_transient_error(exceptions.BadRequest("bad"))
    assert not is_transient_error(exceptions.NotFound("gone"))


def test_the_entry_gives_torch_ranks_from_the_cluster_spec():
    cluster = {"workerpool0": ["cmle-0:2222"], "workerpool1": ["w-0:2222", "w-1:2222"]}
    spec = {"cluster": cluster, "task": {"type": "workerpool1", "index": 1}}
    env = vertex_entry.rank_environment({"CLUSTER_SPEC": json.dumps(spec)})
    assert env == {
        "MASTER_ADDR": "cmle-0", "MASTER_PORT": "2222", "WORLD_SIZE": "3", "RANK": "2",
        "NODE_RANK": "2", "LOCAL_RANK": "0",
    }  # fmt: skip
    assert vertex_entry.rank_environment({})["RANK"] == "0"  # one machine, no cluster spec


def test_the_entry_maps_checkpoints_to_the_mount():
    path_map = {"gs://b": "/gcs/b"}
    assert vertex_entry.local_path("gs://b/ti/checkpoints/", path_map) == "/gcs/b/ti/checkpoints/"
    assert vertex_entry.local_path("gs://c/x", path_map) is None


def test_a_sample_of_the_catalog_is_legal_for_the_fakes_pairing_table():
    catalog = load("airflow_stepop.backends.vertex")
    assert catalog.region == "us-central1" and catalog.date
    sample = catalog.types[::3] + tuple(m for m in catalog.types if m.gpu_count)
    for machine in sample:
        name, _, accelerator = machine.name.partition("+")
        kind, _, count = accelerator.rpartition("x")
        assert check_machine(name, kind, int(count or 0)) is None, machine.name
        assert machine.price_per_hour and 0 < machine.spot_price_per_hour < machine.price_per_hour
