"""Vertex steps end to end through dag.test() on the emulated cloud (process mode)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re

import pytest
import requests

from airflow_stepop import ArtifactRef
from tests.integration.fault_steps import hold, two_phases
from tests.integration.faults import preempted_once_checkpointed, submit_step, trigger_for
from tests.integration.vertex.conftest import PROJECT, custom_jobs, dags, xcoms

TOTAL = float(sum(range(100_000)))
BASE = "127.0.0.1:5000/stepop-base/python:3.11-bookworm"


def _read(results, name):
    return json.loads((results / f"{name}.json").read_text())


def test_arrays_and_a_model_directory_pass_between_vertex_steps(gcp, ctl, capfd):
    run = dags().vx_pipeline().test()
    assert run.state == "success"
    assert _read(gcp["results"], "check") == {"score": 2 * TOTAL, "parts": TOTAL, "loaded": TOTAL}
    rows = xcoms(run)
    stored = rows[("train", "return_value", -1)]
    ref = ArtifactRef.from_record(stored["__data__"])
    assert ref.uri.startswith(gcp["root"] + "/") and ref.size > 800_000
    # what a plain task's load() reads with: the operator's connection, in the XCom
    assert stored["__data__"]["conn_id"] == "google_cloud_default"
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
    # no experiment, so no experiment link, and Airflow's end-of-task lookup did not ask for it
    assert rows[("train", "_link_StepExperimentLink", -1)] == ""
    out, err = capfd.readouterr()
    assert f"Step job: {link}" in out + err  # the task log leads to the job without the UI
    assert not [
        line for line in (out + err).splitlines() if "XCom not found" in line and "_link_" in line
    ]
    # nothing of the connection reaches a job: only the step's and our own variables
    for job in custom_jobs(gcp["fake"]):
        names = {
            e["name"] for e in job["job_spec"]["worker_pool_specs"][0]["container_spec"]["env"]
        }
        ours = {"PYTHONUNBUFFERED", "STEPOP_PATH_MAP", "STEPOP_SPEC_URI", "STEPOP_BOOTSTRAP",
                "STEPOP_SPEC_SHA256", "STEPOP_TRY_ID"}  # fmt: skip
        assert names <= {"SETTING", *ours}, names


def test_a_machine_type_vertex_refuses_names_the_argument_and_the_closest_types(gcp, ctl):
    """A type our catalog lacks is taken as given at parse: Vertex's 400 is the first word."""
    run = dags().vx_misspelt_machine().test()
    assert run.state == "failed"
    failure = _read(gcp["results"], "failure")
    assert failure.startswith("SettingsError: Vertex AI refused the job and started nothing: ")
    assert "machine_type='n1-standrd-4' is not in our catalog; the closest there: " in failure
    assert "'n1-standard-4'" in failure
    assert custom_jobs(gcp["fake"], "misspelt-machine") == []


def test_a_raising_step_fails_with_the_remote_exception_and_the_job_error(gcp, ctl):
    run = dags().vx_step_raises().test()
    assert run.state == "failed"
    failure = _read(gcp["results"], "failure")
    assert failure.startswith("StepFailedError: Step job ")
    assert "exited with a non-zero status of 1" in failure  # the CustomJob's error.message
    assert "The step raised ValueError: bad value 42" in failure
    assert 'in explode\n    raise ValueError(f"bad value {x}")' in failure  # remote traceback
    assert "about to fail" in failure  # the log tail, relayed from Cloud Logging


def test_a_final_read_past_its_cap_relays_the_end_and_says_lines_were_left_out(
    gcp, ctl, capfd, monkeypatch
):
    """A job that printed more since its last read than the final read's cap (20 pages of 1000;
    1 page here, to print less): its traceback and last lines still arrive, after a note of
    the gap. Before, the read stopped at the cap and they were lost."""
    from airflow_stepop.backends.vertex import triggerer_calls as vertex

    monkeypatch.setattr(vertex, "FINAL_LOG_PAGES", 1)
    module = dags()
    run = module.vx_loud_failure().test()
    assert run.state == "failed"
    out = capfd.readouterr().out
    printed = [int(n) for n in re.findall(r"\] (\d{6}) loud\b", out)]
    assert printed == sorted(set(printed)) and printed[-1] == module.LOUD_LINES - 1
    assert len(printed) < module.LOUD_LINES  # some were left out...
    assert "log lines were unread when the job ended: the lines before its last" in out  # ...said
    assert "the last words before the raise" in _read(gcp["results"], "failure")


def test_a_missing_bucket_is_named_and_no_job_is_created(gcp, ctl):
    run = dags().vx_missing_bucket().test()
    assert run.state == "failed"
    failure = _read(gcp["results"], "failure")
    assert failure.startswith(
        "SettingsError: @task.vertex_step(task_id='nowhere'): the artifact root "
        "'gs://no-such-bucket-stepop/steps' is in gs://no-such-bucket-stepop, which does not exist "
        "(or the connection 'google_cloud_default' cannot see it)"
    )
    assert "CreateCustomJob" not in ctl.counters()


def test_a_retry_reattaches_to_the_running_job_with_one_create(gcp, ctl):
    run = dags().vx_retry_reattaches().test()
    assert run.state == "success"
    assert xcoms(run)[("held", "return_value", -1)] == "done by the first job"
    assert ctl.counters()["CreateCustomJob"] == 1  # try 2 re-attached instead of submitting


def test_a_retry_after_the_job_succeeded_returns_its_result_with_one_create(gcp, ctl):
    run = dags().vx_retry_after_success().test()
    assert run.state == "success"
    assert xcoms(run)[("paid_once", "return_value", -1)] == "computed once"
    assert ctl.counters()["CreateCustomJob"] == 1  # try 2 reused try 1's verified result
    (job,) = custom_jobs(gcp["fake"], "paid-once")  # and the UI links to the job that made it
    assert job["state"] == "JOB_STATE_SUCCEEDED"
    job_id = job["name"].rsplit("/", 1)[-1]
    assert f"/training/{job_id}/cpu?" in xcoms(run)[("paid_once", "_link_StepJobLink", -1)]


def test_a_failure_after_submit_with_no_retry_left_cancels_the_custom_job(gcp, ctl):
    from tests.waiting import wait_for

    run = dags().vx_failure_after_submit().test()
    assert run.state == "failed"
    assert _read(gcp["results"], "failure") == "RuntimeError: simulated: failure after submit"
    (job,) = custom_jobs(gcp["fake"], "orphan")
    counters = ctl.counters()
    assert counters["CreateCustomJob"] == 1
    assert counters.get("CancelCustomJob") == 1  # the worker cancelled it: no retry would come
    wait_for(
        lambda: custom_jobs(gcp["fake"], "orphan")[0]["state"] == "JOB_STATE_CANCELLED",
        60, "the orphaned job to be cancelled",
    )  # fmt: skip


def test_throttling_on_a_fifth_of_the_calls_still_succeeds(gcp, ctl):
    ctl.add_faults({"kind": "throttle", "operation": "*", "rate": 0.2})
    run = dags().vx_chain().test()
    assert run.state == "success"
    assert xcoms(run)[("total", "return_value", -1)] == 50_000.0
    assert ctl.counters()["CreateCustomJob"] >= 2  # throttled creates are counted too
    ctl.clear_faults()  # the test's own list call below is not the step's to retry
    assert len(custom_jobs(gcp["fake"], "vx-chain-")) == 2  # retried, never doubled


def test_a_stockout_fails_the_task_with_the_services_reason(gcp, ctl):
    ctl.add_faults({"kind": "job_failure", "match": "scarce"})
    run = dags().vx_stockout().test()
    assert run.state == "failed"
    failure = _read(gcp["results"], "failure")
    assert "JOB_STATE_FAILED: The zone does not have enough resources available" in failure


def test_a_paused_job_is_never_taken_as_success_and_is_cancelled(gcp, ctl):
    from tests.waiting import wait_for

    ctl.add_faults({"kind": "job_failure", "match": "scarce", "state": "JOB_STATE_PAUSED"})
    run = dags().vx_stockout().test()
    assert run.state == "failed"
    assert "JOB_STATE_PAUSED" in _read(gcp["results"], "failure")

    def newest_state() -> str:
        return custom_jobs(gcp["fake"], "scarce")[0]["state"]  # newest first: this run's job

    # a paused job would wait on the service for nobody: the failed step cancels it
    wait_for(lambda: newest_state() == "JOB_STATE_CANCELLED", 30, "the paused job is cancelled")


def test_a_spot_preemption_resumes_from_the_checkpoint(gcp, ctl):
    # the first attempt is preempted once it has written its checkpoint, never before
    checkpointed = gcp["results"] / "checkpointed"
    with preempted_once_checkpointed(ctl, checkpointed, match="resumable"):
        run = dags().vx_spot_resumes().test()
    assert run.state == "success"
    assert xcoms(run)[("resumable", "return_value", -1)] == "resumed at epoch 7"
    (job,) = custom_jobs(gcp["fake"], "resumable")
    job_id = job["name"].rsplit("/", 1)[-1]
    log = requests.get(f"{gcp['fake']}/_fake/logs/{job_id}", timeout=10).text
    assert log.count("The replicas were preempted (Spot VM).") == 1
    assert job["job_spec"]["scheduling"]["strategy"] == "SPOT"
    checkpoints = job["job_spec"]["base_output_directory"]["output_uri_prefix"]
    # the task instance's directory (<map_index>/<instance>), shared by its tries' runs
    assert checkpoints.startswith(gcp["root"] + "/")
    assert re.search(r"/resumable/-1/[0-9a-f]{12}$", checkpoints)


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
    # The 8 s count from execute(), before the job exists. The SDK's first import in this
    # process (4 s on the idle machine, over 8 s on a loaded 2-core one) must not be among them,
    # or the timeout comes before the job is created and there is nothing to cancel.
    from google.cloud import aiplatform_v1  # noqa: F401

    run = dags().vx_times_out().test()
    assert run.state == "failed"
    assert _read(gcp["results"], "failure").startswith("AirflowTaskTimeout")
    assert ctl.counters()["CancelCustomJob"] == 1
    (job,) = custom_jobs(gcp["fake"], "slow")
    assert job["state"] in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED")
    assert job["job_spec"]["scheduling"]["timeout"] == "308s"  # the service's limit: a backstop


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


def test_an_experiment_must_exist_and_the_job_runs_under_it(gcp, ctl):
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform_v1

    run = dags().vx_experiment().test()  # the experiment was never created
    assert run.state == "failed"
    failure = _read(gcp["results"], "failure")
    assert "NotFound" in failure and "contexts/stepop-it-exp" in failure, failure
    metadata = aiplatform_v1.MetadataServiceClient(
        transport="rest", client_options=ClientOptions(api_endpoint=gcp["fake"]),
        credentials=AnonymousCredentials(),
    )  # fmt: skip
    parent = "projects/stepop-it/locations/us-central1/metadataStores/default"
    metadata.create_context(parent=parent, context_id="stepop-it-exp",
                            context={"schema_title": "system.Experiment"})  # fmt: skip
    run = dags().vx_experiment().test()
    assert run.state == "success"
    jobs = [j for j in custom_jobs(gcp["fake"], "logged") if j["state"] == "JOB_STATE_SUCCEEDED"]
    spec = jobs[0]["job_spec"]
    assert spec["experiment"] == f"{parent}/contexts/stepop-it-exp"
    assert not spec.get("experiment_run")  # Vertex makes and names the job's run itself
    assert spec["service_account"] == "trainer@stepop-it.iam.gserviceaccount.com"
    link = xcoms(run)[("logged", "_link_StepExperimentLink", -1)]
    assert link.endswith("/locations/us-central1/experiments/stepop-it-exp/runs?project=stepop-it")


def _submit(gcp, function, args, task_id="held"):
    """Stage and submit one step straight through the backend (no DAG): (backend, handle)."""
    from airflow_stepop.backends.vertex.backend import VertexBackend
    from airflow_stepop.backends.vertex.config import VertexJobConfig

    backend = VertexBackend(job=VertexJobConfig(machine_type="n1-standard-4", image_uri=BASE))
    handle = submit_step(
        backend, function, args, root=gcp["root"], conn_id="google_cloud_default",
        dag_id="vx_direct", task_id=task_id,
    )  # fmt: skip
    return backend, handle


def test_a_user_kill_cancels_the_custom_job(gcp, ctl):
    from tests.waiting import wait_for

    backend, handle = _submit(gcp, hold, [str(gcp["results"] / "never")])
    trigger = trigger_for(backend, handle)

    async def user_kills_the_task() -> None:
        waiting = asyncio.ensure_future(anext(aiter(trigger.run())))
        await asyncio.to_thread(
            wait_for, lambda: backend.status(handle).state == "running", 60, "the job to run"
        )
        assert not waiting.done()  # deferred: the trigger is waiting for the job
        waiting.cancel()  # a user's mark failed / clear: Airflow cancels the trigger's run,
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        await trigger.on_kill()  # then awaits its on_kill

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
            VertexStepOperator(task_id="t", python_callable=dict, image_uri=BASE, **kwargs)
    assert ctl.counters() == {}


@pytest.mark.container
def test_a_step_runs_in_the_image_in_container_mode(gcp, ctl, registry_image, docker_engine):
    run = dags().vx_in_container().test()
    assert run.state == "success"
    assert xcoms(run)[("contained", "return_value", -1)] == {"double": 42, "python": True}
    (job,) = custom_jobs(gcp["fake"], "contained")
    assert job["labels"]["stepop_fake_mode"] == "container"


@pytest.mark.container
def test_a_step_with_a_built_image_runs_in_it_while_the_fake_runs_processes(
    gcp, ctl, registry_image, docker_engine, build_settings
):
    """The fake's default mode (process) runs a job with this virtualenv's packages; a step
    whose image was built runs in that image (a container), so it sees its pinned tabulate."""
    import tabulate

    assert tabulate.__version__ != "0.9.0"  # the virtualenv's own: what process mode would see
    assert ctl.mode() == "process"

    run = dags().vx_pinned_requirement().test()

    assert run.state == "success"
    assert xcoms(run)[("pinned", "return_value", -1)] == "0.9.0"
    job = custom_jobs(gcp["fake"], "pinned")[0]  # newest first
    image = job["job_spec"]["worker_pool_specs"][0]["container_spec"]["image_uri"]
    assert image.startswith(f"{gcp['registry']}/stepop-vertex-it:")


def _count_lines(n: int) -> int:
    import time

    for i in range(n):
        print(f"line {i}", flush=True)
        time.sleep(0.01)
    return n


def test_one_list_call_answers_for_many_jobs(gcp, ctl):
    from tests.waiting import wait_for

    submitted = [_submit(gcp, _count_lines, [3], task_id=f"many{i}") for i in range(3)]
    backend, handles = submitted[0][0], [h for _, h in submitted]
    ctl.reset()

    def all_done() -> bool:
        answers = asyncio.run(backend.astatuses(handles))
        return len(answers) == 3 and all(a.terminal for a in answers.values()) and answers

    answers = wait_for(all_done, 60, "three jobs to end")
    counters = ctl.counters()
    assert counters["ListCustomJobs"] >= 1 and "GetCustomJob" not in counters  # one List a poll
    assert {a.state for a in answers.values()} == {"succeeded"}
    # The pages hold each job's state and times only; its facts come from one describe.
    assert not any(a.details for a in answers.values())
    final = asyncio.run(backend.astatus(handles[0]))
    assert final.state == "succeeded" and final.details["machine_type"] == "n1-standard-4"
    assert ctl.counters()["GetCustomJob"] == 1


def test_a_list_page_holds_only_the_fields_its_read_mask_names(gcp, ctl):
    """As Vertex answers: the fields named, into messages but never through a repeated one."""
    from google.api_core import exceptions
    from google.cloud.aiplatform_v1 import JobState

    backend, handle = _submit(gcp, _count_lines, [1], task_id="masked")
    jobs = backend.access.jobs
    request = {"parent": backend.access.parent, "read_mask": {"paths": ["name", "state"]}}
    (job,) = [j for j in jobs.list_custom_jobs(request=request) if j.name == handle["name"]]
    assert job.state != JobState.JOB_STATE_UNSPECIFIED
    assert not job.display_name and not job.job_spec.worker_pool_specs and not job.create_time
    with pytest.raises(exceptions.BadRequest, match="repeated"):
        request["read_mask"] = {"paths": ["job_spec.worker_pool_specs.machine_spec"]}
        list(jobs.list_custom_jobs(request=request))


def test_log_lines_that_arrive_late_are_relayed_once_and_in_order(gcp, ctl):
    ctl.add_faults({"kind": "log_delay", "seconds": 3.0})
    backend, handle = _submit(gcp, _count_lines, [300], task_id="chatty")

    async def relay() -> list[str]:
        lines: list[str] = []
        cursor = None
        while True:
            status = await backend.astatus(handle)
            got, cursor = await backend.alogs(handle, cursor)
            lines += got
            if status.terminal:
                return lines
            await asyncio.sleep(0.3)

    lines = [line for line in asyncio.run(relay()) if line.startswith("line ")]
    assert lines == [f"line {i}" for i in range(300)]


def test_without_deferral_the_worker_waits_and_gets_the_same_result(gcp, ctl):
    run = dags().vx_not_deferred().test()
    assert run.state == "success"
    assert xcoms(run)[("blocking", "return_value", -1)] == 144
    assert ctl.counters()["CreateCustomJob"] == 1


def test_a_trigger_resumed_by_another_triggerer_continues_the_relay_where_it_stopped(
    gcp, ctl, capfd
):
    from airflow_stepop.backends.vertex.job import epoch
    from airflow_stepop.backends.vertex.triggerer_calls import LOG_LOOKBACK_S
    from airflow_stepop.triggers.step_job import StepJobTrigger
    from tests.waiting import wait_for

    release = gcp["results"] / "release"
    backend, handle = _submit(gcp, two_phases, [str(release)], task_id="two_phases")
    job_id = handle["job_id"]
    first = trigger_for(backend, handle, storage_conn_id="google_cloud_default")
    bucket, prefix = handle["run_uri"].removeprefix("gs://").split("/", 1)
    saved = gcp["gcs"].bucket(bucket).blob(f"{prefix.rstrip('/')}/relay-{job_id}.json")

    def before_entries() -> list[dict]:  # the job's "before" lines in the fake's Cloud Logging
        answer = requests.post(
            f"{gcp['fake']}/v2/entries:list", timeout=10,
            json={"filter": f'resource.type="ml_job" AND resource.labels.job_id="{job_id}"'},
        ).json()  # fmt: skip
        return [e for e in answer.get("entries", []) if e["textPayload"].startswith("before")]

    def saved_cursor() -> dict | None:  # once it has seen all three "before" lines
        if not saved.exists():
            return None
        cursor = json.loads(saved.download_as_bytes())["cursor"]
        before = before_entries()
        covered = len(before) == 3 and all(e["insertId"] in cursor["seen"] for e in before)
        return cursor if covered else None

    async def relay_until_saved() -> dict:
        task = asyncio.ensure_future(anext(aiter(first.run())))
        cursor = await asyncio.to_thread(wait_for, saved_cursor, 90, "a saved cursor", interval=0.2)
        assert not task.done()  # the job is still waiting for its release
        task.cancel()  # the triggerer dies
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return cursor

    cursor = asyncio.run(relay_until_saved())
    shown = handle["display_name"]  # the task log names the job as its console does
    assert f"[{shown}] before 2" in capfd.readouterr().out  # the first triggerer relayed them
    # The resumed trigger's first read looks back LOG_LOOKBACK_S from the saved timestamp, so
    # the service answers with the "before" lines again: only the saved ids keep them out.
    since = epoch(cursor["ts"]) - LOG_LOOKBACK_S
    assert all(epoch(e["timestamp"]) >= since for e in before_entries())
    release.touch()
    resumed = StepJobTrigger(**first.serialize()[1])  # what another triggerer rebuilds
    event = asyncio.run(anext(aiter(resumed.run())))
    assert event.payload["status"] == "succeeded"
    logged = capfd.readouterr().out
    assert all(logged.count(f"[{shown}] after {i}") == 1 for i in range(3))
    assert f"[{shown}] before" not in logged  # not relayed twice
    assert ctl.counters()["CreateCustomJob"] == 1  # resuming never submits


def test_a_retry_whose_recorded_job_vertex_no_longer_has_runs_the_step_again(gcp, ctl):
    """Vertex AI answers GetCustomJob of an unknown job with 404 NotFound: the job is gone, so
    the retry submits anew instead of failing."""
    import logging

    from airflow_stepop.backends.vertex.backend import VertexBackend
    from airflow_stepop.backends.vertex.config import VertexJobConfig
    from airflow_stepop.operators.earlier_try import STATE_KEY, EarlierJob, earlier_job

    backend = VertexBackend(job=VertexJobConfig(machine_type="n1-standard-4", image_uri=BASE))
    name = f"projects/{PROJECT}/locations/us-central1/customJobs/4242424242"
    record = {STATE_KEY: {"handle": {"job_id": "4242424242", "name": name}, "try_number": 1}}
    decision = earlier_job(backend, record, 2, "d/r/t/-1", None, logging.getLogger(__name__))
    assert decision == EarlierJob()
