"""Vertex steps end to end through dag.test() on the emulated cloud (process mode)."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from airflow_stepop import ArtifactRef
from tests.integration.vertex.conftest import custom_jobs, dags, xcoms

TOTAL = float(sum(range(100_000)))
BASE = "127.0.0.1:5000/stepop-base/python:3.11-bookworm"


def _read(results, name):
    return json.loads((results / f"{name}.json").read_text())


def test_arrays_and_a_model_directory_pass_between_vertex_steps(gcp, ctl):
    run = dags().vx_pipeline().test()
    assert run.state == "success"
    assert _read(gcp["results"], "check") == {"score": 2 * TOTAL, "parts": TOTAL, "loaded": TOTAL}
    rows = xcoms(run)
    stored = rows[("train", "return_value", -1)]
    ref = ArtifactRef.from_record(stored["__data__"])
    assert ref.uri.startswith(gcp["root"] + "/") and ref.size > 800_000
    assert all(len(json.dumps(value, default=str)) < 1024 for value in rows.values())
    model = ArtifactRef.from_record(rows[("save_model", "return_value", -1)]["__data__"])
    assert model.materializer == "path"
    # one CustomJob per step: train, save_model, score and four mapped shards
    assert ctl.counters()["CreateCustomJob"] == 7
    billing = rows[("train", "vertex_billing", -1)]
    assert billing["machine"] == "n1-highmem-2" and billing["estimated_cost_usd"] > 0
    train_job = [j for j in custom_jobs(gcp["fake"]) if j["labels"]["airflow_task_id"] == "train"]
    machine = train_job[0]["job_spec"]["worker_pool_specs"][0]["machine_spec"]
    assert machine["machine_type"] == "n1-highmem-2"  # the cheapest with 2 vCPU and 4 GiB
    link = rows[("train", "_link_StepJobLink", -1)]
    assert link.startswith("https://console.cloud.google.com/vertex-ai/locations/us-central1/")
    assert "resource.labels.job_id" in rows[("train", "_link_StepLogsLink", -1)]


def test_a_raising_step_fails_with_the_remote_exception_and_the_job_error(gcp, ctl):
    run = dags().vx_step_raises().test()
    assert run.state == "failed"
    failure = _read(gcp["results"], "failure")
    assert failure.startswith("StepFailedError: Step job ")
    assert "exited with a non-zero status of 1" in failure  # the CustomJob's error.message
    assert "The step raised ValueError: bad value 42" in failure
    assert 'in explode\n    raise ValueError(f"bad value {x}")' in failure  # remote traceback
    assert "about to fail" in failure  # the log tail, relayed from Cloud Logging


def test_a_retry_reattaches_to_the_running_job_with_one_create(gcp, ctl):
    run = dags().vx_retry_reattaches().test()
    assert run.state == "success"
    assert xcoms(run)[("held", "return_value", -1)] == "done by the first job"
    assert ctl.counters()["CreateCustomJob"] == 1  # try 2 re-attached instead of submitting


def test_throttling_on_a_fifth_of_the_calls_still_succeeds(gcp, ctl):
    ctl.add_faults({"kind": "throttle", "operation": "*", "rate": 0.2})
    run = dags().vx_chain().test()
    assert run.state == "success"
    assert xcoms(run)[("total", "return_value", -1)] == 50_000.0
    assert ctl.counters()["CreateCustomJob"] == 2  # a throttled create is retried, never doubled


def test_a_stockout_fails_the_task_with_the_services_reason(gcp, ctl):
    ctl.add_faults({"kind": "job_failure", "match": "scarce"})
    run = dags().vx_stockout().test()
    assert run.state == "failed"
    failure = _read(gcp["results"], "failure")
    assert "JOB_STATE_FAILED: The zone does not have enough resources available" in failure


def test_a_paused_job_is_never_taken_as_success(gcp, ctl):
    ctl.add_faults({"kind": "job_failure", "match": "scarce", "state": "JOB_STATE_PAUSED"})
    run = dags().vx_stockout().test()
    assert run.state == "failed"
    assert "JOB_STATE_PAUSED" in _read(gcp["results"], "failure")


def test_a_spot_preemption_resumes_from_the_checkpoint(gcp, ctl):
    ctl.add_faults({"kind": "preempt", "after_seconds": 3.0, "match": "resumable", "count": 1})
    run = dags().vx_spot_resumes().test()
    assert run.state == "success"
    assert xcoms(run)[("resumable", "return_value", -1)] == "resumed at epoch 7"
    (job,) = custom_jobs(gcp["fake"], "resumable")
    assert job["job_spec"]["scheduling"]["strategy"] == "SPOT"
    checkpoints = job["job_spec"]["base_output_directory"]["output_uri_prefix"]
    assert checkpoints.startswith(gcp["root"] + "/") and checkpoints.endswith("/-1")


def test_a_two_node_job_gives_each_node_its_rank(gcp, ctl):
    run = dags().vx_two_nodes().test()
    assert run.state == "success"
    # Only rank 0 writes the result; its view of the cluster:
    assert xcoms(run)[("ranks", "return_value", -1)] == {
        "WORLD_SIZE": "2", "RANK": "0", "NODE_RANK": "0", "LOCAL_RANK": "0", "master": True,
    }  # fmt: skip
    (job,) = custom_jobs(gcp["fake"], "ranks")
    assert [p["replica_count"] for p in job["job_spec"]["worker_pool_specs"]] == ["1", "1"]


def test_execution_timeout_cancels_the_custom_job(gcp, ctl):
    run = dags().vx_times_out().test()
    assert run.state == "failed"
    assert ctl.counters()["CancelCustomJob"] == 1
    (job,) = custom_jobs(gcp["fake"], "slow")
    assert job["state"] in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED")


def test_a_gpu_request_resolves_to_a_priced_spot_machine(gcp, ctl):
    run = dags().vx_gpu().test()
    assert run.state == "success"
    (job,) = custom_jobs(gcp["fake"], "fit")
    machine = job["job_spec"]["worker_pool_specs"][0]["machine_spec"]
    assert (machine["machine_type"], machine["accelerator_type"], machine["accelerator_count"]) == (
        "n1-standard-4",
        "NVIDIA_TESLA_T4",
        1,
    )
    assert job["labels"]["team"] == "ml" and job["labels"]["stepop"] == "step"
    billing = xcoms(run)[("fit", "vertex_billing", -1)]
    assert billing["machine"] == "n1-standard-4+NVIDIA_TESLA_T4x1" and billing["spot"] is True
    assert billing["price_per_hour_usd"] < 0.62  # the spot price, below on-demand
    assert billing["estimated_cost_usd"] > 0


def _hold(release: str) -> str:
    import time
    from pathlib import Path

    deadline = time.monotonic() + 300
    while not Path(release).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return "released"


def test_a_user_kill_cancels_the_custom_job(gcp, ctl):
    from airflow_stepop.artifacts.storage import worker_storage
    from airflow_stepop.backends.base import JobRequest
    from airflow_stepop.backends.naming import job_name, task_key
    from airflow_stepop.backends.vertex import VertexBackend
    from airflow_stepop.backends.vertex_config import VertexJobConfig
    from airflow_stepop.packaging.staging import StepIdentity, stage_step
    from airflow_stepop.triggers.step_job import StepJobTrigger
    from tests.waiting import wait_for

    run_id = f"run-{uuid.uuid4().hex[:6]}"
    key = task_key("vx_kill", run_id, "held", -1)
    staged = stage_step(
        _hold, [str(gcp["results"] / "never")], {}, root=gcp["root"],
        step=StepIdentity("vx_kill", run_id, "held", -1, 1),
        storage=worker_storage("google_cloud_default"),
    )  # fmt: skip
    backend = VertexBackend(job=VertexJobConfig(machine_type="n1-standard-4", image_uri=BASE))
    handle = backend.submit(
        JobRequest(job_name(key, 1), key, staged.spec_uri, staged.run_uri, staged.code_uri)
    )
    trigger = StepJobTrigger(
        backend_path="airflow_stepop.backends.vertex.VertexBackend",
        backend_kwargs=backend.serialize(),
        handle=handle,
        poll_interval=0.2,
    )

    async def user_kills_the_task() -> None:
        waiting = asyncio.ensure_future(anext(aiter(trigger.run())))
        await asyncio.to_thread(
            wait_for, lambda: backend.status(handle).state == "running", 60, "the job to run"
        )
        assert not waiting.done()  # deferred: the trigger is waiting for the job
        await trigger.on_kill()  # what Airflow awaits on mark-failed / clear
        waiting.cancel()

    asyncio.run(user_kills_the_task())
    wait_for(lambda: backend.status(handle).state == "stopped", 60, "the job to be cancelled")
    assert ctl.counters()["CancelCustomJob"] == 1


def test_every_bad_argument_is_refused_before_any_api_call(gcp, ctl):
    from airflow.sdk import DAG

    from airflow_stepop import ResourceSettings, VertexStepOperator
    from airflow_stepop.settings import SettingsError

    bad = [
        {"resources": ResourceSettings(gpu_count=16, gpu_type="H100")},
        {
            "machine_type": "a2-highgpu-1g",
            "accelerator_count": 4,
            "accelerator_type": "NVIDIA_TESLA_A100",
        },
        {"labels": {"Team": "ml"}},
        {"max_runtime": -1},
        {"artifact_root": "s3://elsewhere"},
    ]
    for kwargs in bad:
        with pytest.raises(SettingsError), DAG("vx_refused", schedule=None):
            VertexStepOperator(task_id="t", python_callable=len, image_uri=BASE, **kwargs)
    assert ctl.counters() == {}


@pytest.mark.container
def test_a_step_runs_in_the_image_in_container_mode(gcp, ctl, registry_image, docker_engine):
    run = dags().vx_in_container().test()
    assert run.state == "success"
    assert xcoms(run)[("contained", "return_value", -1)] == {"double": 42, "python": True}
    (job,) = custom_jobs(gcp["fake"], "contained")
    assert job["labels"]["stepop_fake_mode"] == "container"
