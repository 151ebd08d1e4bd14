"""Azure ML steps end to end through dag.test() on the emulated cloud (process mode)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from typing import Any

import pytest
import requests

from airflow_stepop import ArtifactRef
from tests.integration.azureml.conftest import dags, jobs, run_details, xcoms
from tests.integration.fault_steps import hold, two_phases
from tests.integration.faults import preempted_once_checkpointed, submit_step, trigger_for
from tests.waiting import wait_for

BASE = "127.0.0.1:5000/stepop-base/python:3.11-bookworm"


def _read(results, name):
    return json.loads((results / f"{name}.json").read_text())


def test_arrays_and_a_model_directory_pass_between_steps_by_reference(azure, ctl, unclosed_reports):
    run = dags().aml_pipeline().test()
    assert run.state == "success"
    total = float(sum(range(100_000)))
    assert _read(azure["results"], "check") == {
        "scores": [
            {"k": 1, "score": total, "name": "linear", "n": 100_000},
            {"k": 2, "score": 2 * total, "name": "linear", "n": 100_000},
        ],
        "loaded": total,
        "model": ["name.txt", "w.txt"],
    }
    rows = xcoms(run)
    for key in (("weights", "return_value", -1), ("fit", "return_value", -1)):
        stored = rows[key]
        ref = ArtifactRef.from_record(stored["__data__"])
        assert ref.uri.startswith(azure["root"] + "/") and "/result/" in ref.uri
        assert len(json.dumps(stored)) < 1024
    assert ArtifactRef.from_record(rows[("weights", "return_value", -1)]["__data__"]).size > 800_000
    # one job per step: weights, fit and two mapped scores
    assert ctl.counters()["Jobs_CreateOrUpdate"] == 4
    billing = rows[("weights", "azureml_billing", -1)]
    assert billing["machine"] == "Standard_F2s_v2"  # the cheapest with 2 vCPU and 4 GiB
    assert billing["billable_seconds"] >= 1 and billing["estimated_cost_usd"] > 0
    assert billing["spot"] is False
    link = rows[("weights", "_link_StepJobLink", -1)]
    assert link.startswith("https://ml.azure.com/runs/aml-pipeline-weights-")
    assert "/experiments/aml_pipeline?" in rows[("weights", "_link_StepExperimentLink", -1)]
    job = [j for j in jobs(azure["fake"], "aml-pipeline-weights")][-1]["properties"]
    assert job["experimentName"] == "aml_pipeline"
    assert job["resources"]["instanceType"] == "Standard_F2s_v2"
    assert job["computeId"] is None  # serverless
    # no credential anywhere the job, the UI or the logs can see
    key = azure["env"]["AZURE_STORAGE_CONNECTION_STRING"].split("AccountKey=")[1].split(";")[0]
    seen = json.dumps([list(rows.values()), [j["properties"] for j in jobs(azure["fake"])]])
    run_dir = ref.uri.split("/result/")[0].rsplit("/", 1)[0].split("/", 3)[3]
    for name in ("spec.json", "stepop_launch.json"):
        seen += azure["blobs"].download_blob(f"{run_dir}/{name}").readall().decode()
    assert key not in seen and "AccountKey" not in seen and "AIRFLOW_CONN" not in seen
    # each trigger closed its service clients before its event (dag.test() ends its loop then)
    assert unclosed_reports() == []


def test_a_raising_step_fails_with_the_remote_exception(azure, ctl):
    run = dags().aml_step_raises().test()
    assert run.state == "failed"
    failure = _read(azure["results"], "failure")
    assert failure.startswith("StepFailedError: Step job ")
    assert "The step raised ValueError: bad value 42" in failure
    # the remote traceback, with its source line (the fake runs the job on this host, where the
    # DAG file is; test_packaging checks the line comes from the bundle where it is not)
    assert 'in explode\n    raise ValueError(f"bad value {x}")' in failure
    assert "UserError: Execution failed" in failure  # Azure ML's own error for the run


def test_a_finished_jobs_last_lines_arrive_however_much_it_printed_since_the_last_read(
    azure, ctl, capfd
):
    # megabytes printed between two reads of a running job, then the end: its final read goes
    # on to the end of the file, where the last words are, and cuts no line
    module = dags()
    run = module.aml_loud_failure().test()
    assert run.state == "failed"
    out, err = capfd.readouterr()
    printed = [int(n) for n in re.findall(r"\] (\d{6}) x{99}(?!x)", out + err)]
    assert printed == list(range(module.LOUD_LINES))  # in the task log, each line once, whole
    assert "the last words before the raise" in out + err
    failure = _read(azure["results"], "failure")
    assert "The step raised ValueError: loud and failed" in failure
    tail = failure.split("Last lines of the job's log:")[1]
    assert "the last words before the raise" in tail  # in the task's exception too


def test_a_final_read_past_its_cap_relays_the_end_and_says_what_it_left_out(
    azure, ctl, capfd, monkeypatch
):
    # a job that printed more since its last read than the final read's cap (16 MiB; 1 MiB
    # here, to print less): its last lines still arrive, whole, after a note of the gap
    from airflow_stepop.backends.azureml import logs as azureml_logs

    monkeypatch.setattr(azureml_logs, "FINAL_READ_MAX", azureml_logs.LOG_READ_MAX)
    module = dags()
    run = module.aml_loud_failure().test()
    assert run.state == "failed"
    out, err = capfd.readouterr()
    printed = [int(n) for n in re.findall(r"\] (\d{6}) x{99}(?!x)", out + err)]
    [(note, after)] = re.findall(  # the note, then the next line: a whole one
        r"\[\.\.\. (\d+) bytes of this log left out[^\n]*\n[^\n]*?\] (\d{6}) x{99}(?!x)", out + err
    )
    missing = sorted(set(range(module.LOUD_LINES)) - set(printed))
    assert printed == sorted(set(printed)) and printed[-1] == module.LOUD_LINES - 1
    assert missing == list(range(missing[0], int(after)))  # one gap, up to the line after it
    assert int(note) >= 107 * len(missing)  # the job's earlier lines, if unread, are in it
    # the last MiB: these lines, the last words and the traceback, less one cut line at most
    relayed = 107 * (module.LOUD_LINES - int(after))
    assert azureml_logs.LOG_READ_MAX - 107 - 1024 < relayed < azureml_logs.LOG_READ_MAX
    assert "the last words before the raise" in _read(azure["results"], "failure")


def test_a_capacity_failure_shows_the_services_reason(azure, ctl):
    reason = "Not enough quota available for Standard_NC6s_v3 in eastus (requested 6 cores)."
    ctl.add_faults({"kind": "job_failure", "match": "needs-gpu", "reason": reason,
                    "code": "QuotaExceeded"})  # fmt: skip
    run = dags().aml_capacity().test()
    assert run.state == "failed"
    failure = _read(azure["results"], "failure")
    assert f"QuotaExceeded: {reason}" in failure


def test_a_vm_size_azure_ml_refuses_names_the_argument_and_the_closest_sizes(azure, ctl):
    """A size our catalog lacks is taken as given at parse: Azure ML's 400 is the first word."""
    run = dags().aml_misspelt_size().test()
    assert run.state == "failed"
    failure = _read(azure["results"], "failure")
    assert failure.startswith("SettingsError: Azure ML refused the job and started nothing: ")
    assert "instance_type='Standard_DS3v2' is not in our catalog; the closest there: " in failure
    assert "'Standard_DS3_v2'" in failure
    assert jobs(azure["fake"], "misspelt-size") == []


def test_a_job_not_responding_fails_the_step_and_is_cancelled(azure, ctl):
    from tests.waiting import wait_for

    ctl.add_faults({"kind": "job_failure", "match": "needs-gpu", "status": "NotResponding",
                    "reason": "Node lost."})  # fmt: skip
    run = dags().aml_capacity().test()
    assert run.state == "failed"
    assert "the job is NotResponding: Node lost." in _read(azure["results"], "failure")
    # a job that stopped answering would hold its nodes for nobody: the failed step cancels it
    newest = lambda: jobs(azure["fake"], "needs-gpu")[-1]["properties"]["status"]  # noqa: E731
    wait_for(lambda: newest() == "Canceled", 30, "the unresponsive job is cancelled")


def test_a_retry_reattaches_to_the_running_job_with_one_job(azure, ctl):
    run = dags().aml_retry_reattaches().test()
    assert run.state == "success"
    assert xcoms(run)[("held", "return_value", -1)] == "done by the first job"
    assert ctl.counters()["Jobs_CreateOrUpdate"] == 1  # try 2 re-attached
    assert len(jobs(azure["fake"], "aml-retry-reattaches-held")) == 1


def test_throttling_on_a_fifth_of_the_calls_still_succeeds(azure, ctl):
    ctl.add_faults({"kind": "throttle", "operation": "*", "rate": 0.2, "retry_after": 1})
    run = dags().aml_step_raises().test()  # fails on purpose: the failure must be the step's
    assert run.state == "failed"
    assert "bad value 42" in _read(azure["results"], "failure")
    run = dags().aml_pipeline().test()
    assert run.state == "success"
    assert _read(azure["results"], "check")["loaded"] == float(sum(range(100_000)))


def test_the_execution_timeout_cancels_the_job(azure, ctl):
    # The 8 s count from execute(), before the job exists. The connection's first import in
    # this process (2 s on the idle machine) must not be among them, or on a loaded machine the
    # timeout could come before the job is created and there would be nothing to cancel.
    from airflow_stepop.hooks import azureml  # noqa: F401

    run = dags().aml_timeout().test()
    assert run.state == "failed"
    assert "AirflowTaskTimeout" in _read(azure["results"], "failure")
    job = jobs(azure["fake"], "aml-timeout-sleeper")[-1]
    assert job["properties"]["limits"]["timeout"] == "PT308S"  # the service's limit: a backstop
    name = job["name"]
    wait_for(lambda: run_details(azure["fake"], name)["status"] == "Canceled", 60, "cancel")
    assert ctl.counters()["Jobs_Cancel"] == 1


def test_a_spot_preemption_resumes_from_the_checkpoint(azure, ctl):
    # the first attempt is preempted once it has written its checkpoint, never before
    checkpointed = azure["results"] / "checkpointed"
    with preempted_once_checkpointed(ctl, checkpointed, match="resumable"):
        run = dags().aml_spot_resumes().test()
    assert run.state == "success"
    assert xcoms(run)[("resumable", "return_value", -1)] == "resumed at epoch 7"
    name = jobs(azure["fake"], "resumable")[-1]["name"]
    log = requests.get(f"{azure['fake'].url}/_fake/logs/{name}", timeout=10).text
    assert log.count("Job preempted (low priority).") == 1
    job = jobs(azure["fake"], "resumable")[-1]["properties"]
    assert job["queueSettings"]["jobTier"] == "Spot"
    assert job["outputs"]["checkpoints"]["mode"] == "ReadWriteMount"
    billing = xcoms(run)[("resumable", "azureml_billing", -1)]
    assert billing["spot"] is True and billing["price_per_hour_usd"] == 0.0586  # low priority


def test_two_nodes_of_two_processes_get_torch_ranks_and_rank_0_answers(azure, ctl, capfd):
    run = dags().aml_two_nodes().test()
    assert run.state == "success"
    assert xcoms(run)[("ranks", "return_value", -1)] == {
        "WORLD_SIZE": "4", "RANK": "0", "LOCAL_RANK": "0", "NODE_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
    }  # fmt: skip
    job = jobs(azure["fake"], "aml-two-nodes-ranks")[-1]["properties"]
    assert job["resources"]["instanceCount"] == 2
    assert job["distribution"] == {"distributionType": "PyTorch", "processCountPerInstance": 2}
    out, err = capfd.readouterr()
    for rank in range(4):  # every process's log reaches the task log, named by its rank
        assert f"rank {rank}: rank {rank} of 4" in out + err


BAD_ARGUMENTS = [
    ({"instance_type": "n1-standard-4"}, "instance_type='n1-standard-4'"),
    ({"instance_count": 0}, "instance_count=0"),
    ({"processes_per_instance": "2"}, "processes_per_instance='2'"),
    ({"job_tier": "Cheap"}, "job_tier='Cheap'"),
    ({"spot": True, "job_tier": "Premium"}, "job_tier='Premium'"),
    ({"max_runtime": -5}, "max_runtime=-5"),
    ({"experiment_name": "my experiment"}, "experiment_name='my experiment'"),
    ({"identity": "root"}, "identity='root'"),
    ({"tags": {"a/b": "x"}}, "'a/b'"),
    ({"compute": "9cluster"}, "compute='9cluster'"),
    ({"shm_size": "lots"}, "shm_size='lots'"),
    ({"azureml_conn_id": "my conn"}, "azureml_conn_id='my conn'"),
    ({"artifact_root": "s3://bucket/x"}, "artifact_root='s3://bucket/x'"),
    ({"environment": {"1BAD": "x"}}, "'1BAD'"),
    ({"image_uri": None, "docker": None}, "needs an image"),
]


@pytest.mark.parametrize(("arguments", "named"), BAD_ARGUMENTS)
def test_every_bad_argument_is_refused_before_any_api_call(azure, ctl, arguments, named):
    from airflow.sdk import DAG

    from airflow_stepop import AzureMLStepOperator
    from airflow_stepop.settings import SettingsError

    kwargs = {"image_uri": BASE, **arguments}
    with pytest.raises(SettingsError) as err, DAG("aml_refused", schedule=None):
        AzureMLStepOperator(task_id="bad", python_callable=dict, **kwargs)
    assert named in str(err.value)
    assert ctl.counters() == {}


def test_a_request_nothing_fits_names_the_closest_sizes(azure, ctl):
    from airflow.sdk import DAG

    from airflow_stepop import AzureMLStepOperator, ResourceSettings
    from airflow_stepop.catalog import NoFittingMachineError

    with pytest.raises(NoFittingMachineError) as err, DAG("aml_refused", schedule=None):
        AzureMLStepOperator(
            task_id="huge",
            python_callable=dict,
            image_uri=BASE,
            resources=ResourceSettings(gpu_count=16, gpu_type="H100", memory="4TiB"),
        )
    assert "Closest: Standard_ND96isr_H100_v5" in str(err.value)
    assert ctl.counters() == {}


def _submit(azure, function, args, dag_id, task_id):
    """Stage and submit one step straight through the backend (no DAG), in an experiment named
    like the DAG: (backend, handle)."""
    from airflow_stepop.backends.azureml.backend import AzureMLBackend
    from airflow_stepop.backends.azureml.config import AzureMLJobConfig

    config = AzureMLJobConfig(image_uri=BASE, instance_type="Standard_DS3_v2",
                              max_runtime_s=600, experiment_name=dag_id)  # fmt: skip
    backend = AzureMLBackend(job=config)
    handle = submit_step(
        backend, function, args, root=azure["root"], conn_id=None,
        dag_id=dag_id, task_id=task_id,
    )  # fmt: skip
    return backend, handle


def test_a_user_kill_cancels_the_job(azure, ctl):
    backend, handle = _submit(azure, hold, [str(azure["results"] / "never")], "aml_kill", "held")
    trigger = trigger_for(backend, handle)

    async def user_kills_the_task() -> None:
        waiting = asyncio.ensure_future(anext(aiter(trigger.run())))
        await asyncio.to_thread(
            wait_for,
            lambda: run_details(azure["fake"], handle["job_id"])["status"] == "Running",
            60,
            "the job to run",
        )
        assert not waiting.done()  # deferred: the trigger is waiting for the job
        waiting.cancel()  # a user's mark failed / clear: Airflow cancels the trigger's run,
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        await trigger.on_kill()  # then awaits its on_kill

    asyncio.run(user_kills_the_task())
    wait_for(
        lambda: run_details(azure["fake"], handle["job_id"])["status"] == "Canceled",
        60,
        "the job to be canceled",
    )
    assert ctl.counters()["Jobs_Cancel"] == 1


@pytest.mark.container
def test_a_step_runs_in_the_image_in_container_mode(azure, ctl, docker_engine, registry_image):
    run = dags().aml_container().test()
    assert run.state == "success"
    import sys

    answer = xcoms(run)[("in_container", "return_value", -1)]
    assert answer["sum"] == 6
    assert answer["python"] != sys.executable  # the image's interpreter, not this one


def test_the_connection_reaches_the_workspace_and_gives_an_mlclient(azure, ctl):
    from airflow_stepop.hooks.azureml import AzureMLHook

    hook = AzureMLHook()
    assert hook.test_connection() == (True, "Workspace stepop-ws in eastus answers.")
    ml = hook.get_conn()
    assert ml.workspaces.get().name == "stepop-ws"  # azure-ai-ml, same connection
    assert ctl.counters()["Workspaces_Get"] == 2
    # the datastore a datastore root resolves through, as MLClient reads it
    store = ml.datastores.get("workspaceblobstore")
    assert (store.type, store.account_name, store.container_name) == (
        "AzureBlob",
        "devstoreaccount1",
        "azureml-blobstore",
    )


def test_a_named_cluster_is_checked_against_the_request_before_submitting(azure, ctl):
    run = dags().aml_named_clusters().test()
    assert run.state == "failed"  # too_small failed; on_gpus ran
    rows = xcoms(run)
    assert rows[("on_gpus", "return_value", -1)] == "ran on the cluster"
    assert rows[("on_gpus", "azureml_billing", -1)]["machine"] == "Standard_NC6s_v3"
    job = jobs(azure["fake"], "aml-named-clusters-on-gpus")[-1]["properties"]
    assert job["computeId"].endswith("/computes/gpu-cluster")
    failure = _read(azure["results"], "failure")
    assert "compute='cpu-cluster' runs Standard_DS3_v2" in failure
    assert "does not fit resources=ResourceSettings(gpu_count=1);" in failure  # as written
    shared = _read(azure["results"], "shared")
    assert "compute='cpu-cluster' runs Standard_DS3_v2" in shared
    assert "does not fit default_args['step_resources']=ResourceSettings(gpu_count=1)" in shared
    assert jobs(azure["fake"], "too-small-shared") == []
    assert jobs(azure["fake"], "aml-named-clusters-too-small") == []  # refused before any job
    missing = _read(azure["results"], "missing")
    assert "compute='gpu-clustr' is not a compute of the workspace 'stepop-ws'" in missing
    assert jobs(azure["fake"], "aml-named-clusters-misspelt") == []


def test_low_priority_pricing_and_spot_follow_a_named_clusters_vm_priority(azure, ctl):
    run = dags().aml_spot_clusters().test()
    assert run.state == "failed"  # spot_on_dedicated was refused; on_low_priority ran
    rows = xcoms(run)
    assert rows[("on_low_priority", "return_value", -1)] == "ran on low-priority VMs"
    billing = rows[("on_low_priority", "azureml_billing", -1)]
    assert billing["spot"] is True and billing["price_per_hour_usd"] == 0.612  # low priority
    failure = _read(azure["results"], "failure")
    assert "asks for low-priority VMs, but compute='gpu-cluster' is a cluster" in failure
    assert "Dedicated VMs" in failure and "leave compute unset" in failure
    assert jobs(azure["fake"], "aml-spot-clusters-spot-on-dedicated") == []  # refused first


@pytest.mark.container
def test_without_an_engine_azure_ml_builds_the_image_from_the_same_dockerfile(
    azure, ctl, docker_engine, registry_image, monkeypatch
):
    monkeypatch.setenv("AIRFLOW__STEPOP__AZUREML_IMAGE_BUILD", "service")
    run = dags().aml_service_build().test()
    assert run.state == "success"
    assert xcoms(run)[("built", "return_value", -1)] == "azureml"  # the ENV line of the build
    job = jobs(azure["fake"], "aml-service-build-built")[-1]["properties"]
    assert "/environments/stepop-build/versions/" in job["environmentId"]
    assert ctl.counters()["EnvironmentVersions_CreateOrUpdate"] == 1


@pytest.mark.container
def test_a_step_with_an_image_azure_ml_built_runs_in_it_while_the_fake_runs_processes(
    azure, ctl, docker_engine, registry_image, build_settings, monkeypatch
):
    """The fake's default mode (process) runs a job with this virtualenv's packages; Azure ML
    builds the environment of a step with requirements, and the job runs in that image (a
    container), so it sees its pinned tabulate."""
    import tabulate

    assert tabulate.__version__ != "0.9.0"  # the virtualenv's own: what process mode would see
    assert ctl.mode() == "process"
    monkeypatch.setenv("AIRFLOW__STEPOP__AZUREML_IMAGE_BUILD", "service")

    run = dags().aml_pinned_requirement().test()

    assert run.state == "success"
    assert xcoms(run)[("pinned", "return_value", -1)] == "0.9.0"
    job = jobs(azure["fake"], "aml-pinned-requirement-pinned")[-1]["properties"]
    assert "/environments/stepop-build/versions/" in job["environmentId"]


def test_a_spot_retry_resumes_from_the_checkpoints_of_the_first_try(azure, ctl):
    run = dags().aml_spot_retry_resumes().test()
    assert run.state == "success"
    assert xcoms(run)[("flaky_training", "return_value", -1)] == "try 2 resumed at epoch 3"
    names = [j["name"] for j in jobs(azure["fake"], "aml-spot-retry-resumes-flaky-training")]
    assert [n[-3:] for n in names] == ["-t1", "-t2"]  # a failed job is not re-attached


def test_a_worker_lost_before_recording_its_job_is_covered_by_one_list_call(azure, ctl):
    run = dags().aml_lost_worker().test()
    assert run.state == "success"
    assert xcoms(run)[("held", "return_value", -1)] == "done by the first job"
    counters = ctl.counters()
    assert counters["Jobs_CreateOrUpdate"] == 1
    assert len(jobs(azure["fake"], "aml-lost-worker-held")) == 1


def test_a_failure_after_submit_with_no_retry_left_stops_the_job(azure, ctl):
    run = dags().aml_failure_after_submit().test()
    assert run.state == "failed"
    assert "simulated: failure after submit" in _read(azure["results"], "failure")
    [job] = jobs(azure["fake"], "aml-failure-after-submit-orphan")
    assert ctl.counters().get("Jobs_Cancel") == 1  # not orphaned: nobody would come back for it
    name = job["name"]
    wait_for(lambda: run_details(azure["fake"], name)["status"] == "Canceled", 60, "a cancel")


def test_a_retry_after_the_job_succeeded_returns_its_result_with_one_job(azure, ctl):
    run = dags().aml_retry_after_success().test()
    assert run.state == "success"
    rows = xcoms(run)
    assert rows[("paid_once", "return_value", -1)] == "computed once"
    assert ctl.counters()["Jobs_CreateOrUpdate"] == 1  # try 2 reused try 1's verified result
    [job] = jobs(azure["fake"], "aml-retry-after-success-paid-once")
    assert job["properties"]["status"] == "Completed"
    # the UI links to the job that made the result
    assert f"/runs/{job['name']}?" in rows[("paid_once", "_link_StepJobLink", -1)]


def test_a_trigger_resumed_by_another_triggerer_continues_the_relay_where_it_stopped(
    azure, ctl, capfd
):
    from azure.core.exceptions import ResourceNotFoundError

    from airflow_stepop.triggers.step_job import StepJobTrigger

    release, finish = azure["results"] / "release", azure["results"] / "finish"
    args = [str(release), str(finish)]
    backend, handle = _submit(azure, two_phases, args, "aml_relay", "two_phases")
    first = trigger_for(backend, handle)
    name = handle["job_id"]
    saved = f"{handle['run_uri'].split('/', 3)[3].rstrip('/')}/relay-{name}.json"
    log_file = "user_logs/std_log.txt"
    log_url = f"{azure['fake'].url}/_fake/azureml/logs/{name}/{log_file}"

    def saved_past(line: bytes) -> bool:  # the saved offset is past that line
        try:
            document = json.loads(azure["blobs"].download_blob(saved).readall())
        except ResourceNotFoundError:
            return False
        text = requests.get(log_url, timeout=10).content
        end = text.find(line + b"\n")
        offset = document["cursor"]["files"].get(log_file, 0)
        return end >= 0 and offset >= end + len(line) + 1

    async def relay_until_saved() -> None:
        task = asyncio.ensure_future(anext(aiter(first.run())))
        await asyncio.to_thread(wait_for, lambda: saved_past(b"before 2"), 90, "a saved cursor")
        assert not task.done()  # the job is still waiting for its release
        task.cancel()  # the triggerer dies
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(relay_until_saved())
    assert "before 2" in capfd.readouterr().out  # the first triggerer relayed them
    # A cursor as an earlier release saved it, with a reading of its host's monotonic clock:
    # another host's clock (up longer) must not hold back the resumed relay until the job ends.
    document = json.loads(azure["blobs"].download_blob(saved).readall())
    document["cursor"]["read"] = 1e9
    azure["blobs"].upload_blob(saved, json.dumps(document), overwrite=True)
    release.touch()
    resumed = StepJobTrigger(**first.serialize()[1])  # what another triggerer rebuilds

    async def relay_while_running() -> Any:
        task = asyncio.ensure_future(anext(aiter(resumed.run())))
        await asyncio.to_thread(wait_for, lambda: saved_past(b"after 2"), 90, "the after lines")
        assert not task.done()  # relayed while the job runs, not only at its end
        finish.touch()
        return await task

    event = asyncio.run(relay_while_running())
    assert event.payload["status"] == "succeeded"
    logged = capfd.readouterr().out
    assert all(f"after {i}" in logged for i in range(3))
    assert "before" not in logged  # not relayed twice
    assert ctl.counters()["Jobs_CreateOrUpdate"] == 1  # resuming never submits


def test_a_retry_whose_recorded_job_azure_ml_no_longer_has_runs_the_step_again(azure, ctl):
    """Azure ML answers a GET of an unknown job with 404: the job is gone, so the retry submits
    anew instead of failing."""
    import logging

    from airflow_stepop.backends.azureml.backend import AzureMLBackend
    from airflow_stepop.backends.azureml.config import AzureMLJobConfig
    from airflow_stepop.operators.earlier_try import STATE_KEY, EarlierJob, earlier_job

    backend = AzureMLBackend(job=AzureMLJobConfig(image_uri=BASE, instance_type="Standard_DS3_v2"))
    record = {STATE_KEY: {"handle": {"job_id": "aml-deleted-job"}, "try_number": 1}}
    decision = earlier_job(backend, record, 2, "d/r/t/-1", None, logging.getLogger(__name__))
    assert decision == EarlierJob()
