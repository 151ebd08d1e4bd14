"""SageMaker steps end to end through dag.test() on the emulated cloud (process mode)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
import uuid

import pytest

from airflow_stepop import ArtifactRef
from tests.integration.fault_steps import hold, two_phases
from tests.integration.faults import preempted_once_checkpointed, submit_step, trigger_for
from tests.integration.sagemaker.conftest import ROLE, dags, training_jobs, wait_until, xcoms

BASE = "127.0.0.1:5000/stepop-base/python:3.11-bookworm"


def _read(results, name):
    return json.loads((results / f"{name}.json").read_text())


def test_a_step_runs_as_a_training_job_and_a_plain_task_loads_its_result(
    aws, ctl, unclosed_reports
):
    run = dags().sm_pipeline().test()
    assert run.state == "success"
    assert _read(aws["results"], "check") == {
        "summary": {"sum": float(sum(range(100_000))), "n": 100_000, "env": [1500, "s"]},
        "loaded": float(sum(range(100_000))),
    }
    rows = xcoms(run)
    stored = rows[("train", "return_value", -1)]
    assert stored["__classname__"] == "airflow_stepop.artifacts.ref.ArtifactRef"
    ref = ArtifactRef.from_record(stored["__data__"])
    assert ref.uri.startswith(aws["root"] + "/") and ref.size > 800_000
    assert "/output/model/outputs/" in ref.uri  # uploaded by the service, not by the worker
    # what a plain task's load() reads with: the operator's connection, in the XCom
    assert stored["__data__"]["conn_id"] == "aws_default"
    assert len(json.dumps(stored)) < 1024
    billing = rows[("train", "sagemaker_billing", -1)]
    assert billing["instance_type"] == "ml.t3.medium"  # the cheapest with 2 vCPU and 4 GiB
    assert billing["billable_seconds"] >= 1 and billing["estimated_cost_usd"] > 0
    assert ctl.counters().get("CreateTrainingJob") == 2
    # links were stored for the UI (before deferring: the operator pushes them at submit)
    link = rows[("train", "_link_StepJobLink", -1)]
    assert link.startswith("https://us-east-1.console.aws.amazon.com/sagemaker/home")
    assert "logsV2:log-groups" in rows[("train", "_link_StepLogsLink", -1)]
    # the long value travelled whole in the launch document, the short one as Environment
    job = [j for j in training_jobs("total") if j["TrainingJobName"].startswith("sm-pipeline")]
    environment = job[-1]["Environment"]
    assert environment["SHORT_SETTING"] == "s" and "LONG_SETTING" not in environment
    # no credential anywhere the job, the UI or the logs can see
    secret = aws["env"]["AWS_SECRET_ACCESS_KEY"]
    seen = json.dumps([list(rows.values()), [j["Environment"] for j in job]], default=str)
    run_key = ref.uri.split("/output/model/")[0].rsplit("/", 1)[0].split("/", 3)[3]
    for name in ("spec.json", "stepop_launch.json"):
        answer = aws["s3"].get_object(Bucket=aws["bucket"], Key=f"{run_key}/{name}")
        seen += answer["Body"].read().decode()
    assert secret not in seen and "AIRFLOW_CONN" not in seen and "AWS_SECRET" not in seen
    # each trigger closed its service clients before its event (dag.test() ends its loop then)
    assert unclosed_reports() == []


def test_the_execution_timeout_stops_the_job_before_its_max_runtime(aws, ctl):
    run = dags().sm_times_out().test()
    assert run.state == "failed"
    failure = _read(aws["results"], "failure")
    assert failure.startswith("AirflowTaskTimeout")
    assert "sleeper saved its work" in failure  # printed while the job was stopping
    [job] = training_jobs("sm-times-out-sleeper")
    assert job["StoppingCondition"] == {"MaxRuntimeInSeconds": 20 + 300}  # a backstop
    assert ctl.counters()["StopTrainingJob"] == 1
    assert wait_until(
        lambda: training_jobs("sm-times-out-sleeper")[0]["TrainingJobStatus"] == "Stopped",
        60,
        what="a stop",
    )


def test_a_raising_step_fails_with_the_remote_exception_and_the_failure_reason(aws, ctl):
    run = dags().sm_step_raises().test()
    assert run.state == "failed"
    failure = _read(aws["results"], "failure")
    assert failure.startswith("StepFailedError: Step job ")
    assert "AlgorithmError: ValueError: bad value 42" in failure  # the service's FailureReason
    # the traceback, from the job's log tail, with its source line (the fake runs the job on
    # this host, where the DAG file is; test_packaging checks the line comes from the bundle)
    assert 'in explode\n    raise ValueError(f"bad value {x}")' in failure


def test_a_retry_reattaches_to_the_running_job_with_one_create(aws, ctl, monkeypatch):
    import botocore.client

    worker_calls: list[str] = []  # the workers' (synchronous) AWS calls; triggers use aiobotocore
    call = botocore.client.BaseClient._make_api_call

    def recorded(client, operation, params):
        worker_calls.append(operation)
        return call(client, operation, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", recorded)
    run = dags().sm_retry_reattaches().test()
    assert run.state == "success"
    assert xcoms(run)[("held", "return_value", -1)] == "done by the first job"
    counters = ctl.counters()
    assert counters["CreateTrainingJob"] == 1  # try 2 re-attached instead of submitting
    # try 2 found try 1's job in the task state store: one describe, no List call
    assert "ListTrainingJobs" not in worker_calls
    assert worker_calls.count("DescribeTrainingJob") == 1


def test_a_retry_after_the_job_succeeded_returns_its_result_with_one_create(aws, ctl):
    run = dags().sm_retry_after_success().test()
    assert run.state == "success"
    assert xcoms(run)[("paid_once", "return_value", -1)] == "computed once"
    assert ctl.counters()["CreateTrainingJob"] == 1  # try 2 reused try 1's verified result
    [job] = training_jobs("paid-once")  # and the UI links to the job that made it
    assert xcoms(run)[("paid_once", "_link_StepJobLink", -1)].endswith(job["TrainingJobName"])


def test_a_failure_before_submit_logs_its_cause_and_no_missing_link_errors(aws, ctl, capfd):
    run = dags().sm_fails_before_submit().test()
    assert run.state == "failed"
    assert "lock" in _read(aws["results"], "failure")
    assert "CreateTrainingJob" not in ctl.counters()
    out, err = capfd.readouterr()
    # Airflow's end-of-task lookup of the links found no job, so it asked for none
    assert "XCom not found" not in out + err
    assert xcoms(run)[("unshippable", "_link_StepJobLink", -1)] == ""


def test_an_image_sagemaker_cannot_find_fails_with_its_reason_and_no_job(aws, ctl):
    run = dags().sm_missing_image().test()
    assert run.state == "failed"
    assert _read(aws["results"], "failure").startswith(
        "SettingsError: SageMaker refused the job and started nothing: Cannot find the requested "
        "image: 127.0.0.1:5000/stepop/nowhere:v1"
    )
    assert training_jobs("never-pulled") == []


def test_a_template_that_fails_to_render_logs_no_missing_link_errors(aws, ctl, capfd):
    """The task fails before execute(): it stored no link, so none is asked for."""
    run = dags().sm_template_fails_to_render().test()
    assert run.state == "failed"
    out, err = capfd.readouterr()
    assert "UndefinedError" in out + err
    assert "XCom not found" not in out + err
    assert "CreateTrainingJob" not in ctl.counters()


def test_a_failure_after_submit_with_no_retry_left_stops_the_training_job(aws, ctl):
    run = dags().sm_failure_after_submit().test()
    assert run.state == "failed"
    [job] = training_jobs("orphan")
    assert ctl.counters()["StopTrainingJob"] == 1
    assert wait_until(
        lambda: training_jobs("orphan")[0]["TrainingJobStatus"] == "Stopped", 60, what="a stop"
    )


def test_throttling_on_a_fifth_of_the_calls_still_succeeds(aws, ctl):
    ctl.add_faults({"kind": "throttle", "operation": "*", "rate": 0.2})
    run = dags().sm_pipeline().test()
    assert run.state == "success"
    assert _read(aws["results"], "check")["loaded"] == float(sum(range(100_000)))
    counters = ctl.counters()
    # the fake's rates are deterministic: every fifth call was throttled
    assert sum(counters.values()) >= 5


def test_a_spot_interruption_resumes_from_the_checkpoint(aws, ctl, capfd):
    # the first attempt is preempted once it has written its checkpoint, never before
    checkpointed = aws["results"] / "checkpointed"
    with preempted_once_checkpointed(ctl, checkpointed, match="resumable"):
        run = dags().sm_spot_resumes().test()
    assert run.state == "success"
    out, err = capfd.readouterr()
    assert " x 1, spot" in out + err  # the progress lines say what the job runs on
    assert xcoms(run)[("resumable", "return_value", -1)] == "resumed at epoch 7"
    job = [j for j in training_jobs("resumable") if j["TrainingJobStatus"] == "Completed"][-1]
    statuses = [t["Status"] for t in job["SecondaryStatusTransitions"]]
    assert statuses.count("Interrupted") == 1 and statuses.count("Restarting") == 1
    assert job["EnableManagedSpotTraining"] is True
    assert job["CheckpointConfig"]["S3Uri"].startswith(aws["root"] + "/")


def test_a_two_node_job_gives_each_node_its_rank(aws, ctl, capfd):
    run = dags().sm_two_nodes().test()
    assert run.state == "success"
    out, err = capfd.readouterr()  # each node's lines say which host printed them
    assert "algo-1: rank 0 here" in out + err and "algo-2: rank 1 here" in out + err
    # Only rank 0 writes the result; its view of the cluster:
    assert xcoms(run)[("ranks", "return_value", -1)] == {
        "MASTER_ADDR": "algo-1",
        "MASTER_PORT": "29500",
        "WORLD_SIZE": "2",
        "RANK": "0",
        "NODE_RANK": "0",
    }
    job = [j for j in training_jobs("ranks")][-1]
    assert job["ResourceConfig"]["InstanceCount"] == 2


def test_a_request_nothing_fits_is_refused_before_any_api_call(aws, ctl):
    from airflow.sdk import DAG

    from airflow_stepop import ResourceSettings, SageMakerStepOperator
    from airflow_stepop.catalog import NoFittingMachineError

    with pytest.raises(NoFittingMachineError) as err, DAG("sm_refused", schedule=None):
        SageMakerStepOperator(
            task_id="huge",
            python_callable=dict,
            image_uri=BASE,
            resources=ResourceSettings(gpu_count=16, gpu_type="H100", memory="4TiB"),
        )
    assert "Closest: ml.p5.48xlarge" in str(err.value)
    assert ctl.counters() == {}


def _submit(aws, function, args, dag_id, task_id):
    """Stage and submit one step straight through the backend (no DAG): (backend, handle)."""
    from airflow_stepop.backends.sagemaker.backend import SageMakerBackend, SageMakerJobConfig

    backend = SageMakerBackend(
        job=SageMakerJobConfig(role=ROLE, instance_type="ml.m5.large", image_uri=BASE)
    )
    handle = submit_step(
        backend, function, args, root=aws["root"], conn_id="aws_default",
        dag_id=dag_id, task_id=task_id,
    )  # fmt: skip
    return backend, handle


def test_a_missing_bucket_is_told_from_one_that_exists(aws):
    from airflow_stepop.artifacts.storage import missing_store, worker_storage

    storage = worker_storage("aws_default")
    assert (
        missing_store("s3://no-such-bucket-stepop/steps", storage) == "s3://no-such-bucket-stepop"
    )
    assert missing_store(aws["root"], storage) is None


def test_a_role_given_by_name_is_looked_up_and_a_missing_one_is_named(aws, ctl):
    import boto3

    from airflow_stepop.backends.sagemaker.backend import SageMakerBackend, SageMakerJobConfig
    from airflow_stepop.settings import SettingsError

    name = f"trainer-{uuid.uuid4().hex[:6]}"
    iam = boto3.client("iam", endpoint_url=aws["env"]["AWS_ENDPOINT_URL"])
    iam.create_role(RoleName=name, AssumeRolePolicyDocument="{}")

    def submit(role):
        job = SageMakerJobConfig(role=role, instance_type="ml.m5.large", image_uri=BASE)
        return submit_step(
            SageMakerBackend(job=job), len, [[1]], root=aws["root"], conn_id="aws_default",
            dag_id="sm_role", task_id="by_name",
        )  # fmt: skip

    with pytest.raises(SettingsError) as err:
        submit(f"missing-{name}")
    assert f"role 'missing-{name}' (role= or [stepop] sagemaker_role)" in str(err.value)
    assert "CreateTrainingJob" not in ctl.counters()
    handle = submit(name)
    sagemaker = boto3.client("sagemaker", endpoint_url=aws["fake"])
    job = sagemaker.describe_training_job(TrainingJobName=handle["job_id"])
    assert job["RoleArn"] == f"arn:aws:iam::123456789012:role/{name}"


def test_a_trigger_resumed_by_another_triggerer_continues_the_relay_where_it_stopped(
    aws, ctl, capfd
):
    import boto3

    from airflow_stepop.triggers.step_job import StepJobTrigger

    release = aws["results"] / "release"
    backend, handle = _submit(aws, two_phases, [str(release)], "sm_relay", "two_phases")
    first = trigger_for(backend, handle, storage_conn_id="aws_default")
    bucket, prefix = handle["run_uri"].removeprefix("s3://").split("/", 1)
    saved = f"{prefix.rstrip('/')}/relay-{handle['job_id']}.json"
    logs = boto3.client("logs", endpoint_url=aws["env"]["AWS_ENDPOINT_URL"])

    def messages(stream: str, token: str | None = None) -> list[str]:
        kwargs = {"nextToken": token} if token else {}
        answer = logs.get_log_events(
            logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=stream,
            startFromHead=True, **kwargs,
        )  # fmt: skip
        return [event["message"] for event in answer["events"]]

    def all_before_lines_saved() -> bool:  # the saved cursor is past "before 2"
        try:
            body = aws["s3"].get_object(Bucket=bucket, Key=saved)["Body"].read()
        except aws["s3"].exceptions.NoSuchKey:
            return False
        streams = json.loads(body)["cursor"]["streams"]
        return any(
            token and "before 2" in messages(stream) and not messages(stream, token)
            for stream, token in streams.items()
        )

    async def relay_until_saved() -> None:
        task = asyncio.ensure_future(anext(aiter(first.run())))
        await asyncio.to_thread(wait_until, all_before_lines_saved, 90, 0.2, "a saved cursor")
        assert not task.done()  # the job is still waiting for its release
        task.cancel()  # the triggerer dies
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(relay_until_saved())
    assert "before 2" in capfd.readouterr().out  # the first triggerer relayed them
    release.touch()
    resumed = StepJobTrigger(**first.serialize()[1])  # what another triggerer rebuilds
    event = asyncio.run(anext(aiter(resumed.run())))
    assert event.payload["status"] == "succeeded"
    logged = capfd.readouterr().out
    assert all(f"after {i}" in logged for i in range(3))
    assert "before" not in logged  # not relayed twice
    assert ctl.counters()["CreateTrainingJob"] == 1  # resuming never submits


def test_a_user_kill_stops_the_training_job(aws, ctl):
    backend, handle = _submit(aws, hold, [str(aws["results"] / "never")], "sm_kill", "held")
    trigger = trigger_for(backend, handle)

    async def user_kills_the_task() -> None:
        waiting = asyncio.ensure_future(anext(aiter(trigger.run())))
        await asyncio.to_thread(
            wait_until,
            lambda: backend.describe(handle)["SecondaryStatus"] == "Training",
            60,
            what="the job to train",
        )
        assert not waiting.done()  # deferred: the trigger is waiting for the job
        waiting.cancel()  # a user's mark failed / clear: Airflow cancels the trigger's run,
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        await trigger.on_kill()  # then awaits its on_kill

    asyncio.run(user_kills_the_task())
    ended = wait_until(
        lambda: (d := backend.describe(handle))["TrainingJobStatus"] == "Stopped" and d,
        60,
        what="the job to stop",
    )
    assert ended["SecondaryStatus"] == "Stopped"
    assert ctl.counters()["StopTrainingJob"] == 1


def test_every_job_option_reaches_the_training_job_request(aws, ctl):
    run = dags().sm_all_options().test()
    assert run.state == "success"
    job = [j for j in training_jobs("configured") if j["TrainingJobName"].startswith("sm-all")][-1]
    assert job["ResourceConfig"] == {
        "InstanceType": "ml.c5.xlarge",
        "InstanceCount": 1,
        "VolumeSizeInGB": 50,
        "KeepAlivePeriodInSeconds": 600,
        "VolumeKmsKeyId": "alias/stepop-volume",
    }
    assert job["StoppingCondition"] == {"MaxRuntimeInSeconds": 1200}
    assert job["VpcConfig"] == {
        "Subnets": ["subnet-0123456789abcdef0"],
        "SecurityGroupIds": ["sg-0123456789abcdef0"],
    }
    assert job["OutputDataConfig"]["KmsKeyId"].startswith("arn:aws:kms:us-east-1:")
    assert job["OutputDataConfig"]["CompressionType"] == "NONE"
    assert job["EnableManagedSpotTraining"] is False
    # not only a spot job's: a retry resumes from them, as on the other clouds
    assert re.search(r"/configured/-1/[0-9a-f]{12}/checkpoints/$", job["CheckpointConfig"]["S3Uri"])
    assert xcoms(run)[("configured", "return_value", -1)].endswith("/opt/ml/checkpoints")


def test_without_deferral_the_worker_waits_and_gets_the_same_result(aws, ctl):
    run = dags().sm_not_deferred().test()
    assert run.state == "success"
    assert xcoms(run)[("blocking", "return_value", -1)] == 144
    assert ctl.counters()["CreateTrainingJob"] == 1


def test_a_run_of_5xx_answers_longer_than_the_client_retries_is_waited_out(aws, ctl, capfd):
    # Six 503s in a row: more than botocore's own retries, so the trigger sees the error,
    # judges it transient and backs off instead of failing the task.
    ctl.add_faults({"kind": "error", "status": 503, "operation": "DescribeTrainingJob", "count": 6})
    run = dags().sm_not_deferred().test()
    assert run.state == "success"
    assert xcoms(run)[("blocking", "return_value", -1)] == 144
    assert ctl.counters()["DescribeTrainingJob"] >= 7
    out, err = capfd.readouterr()
    assert (
        "(ServiceUnavailable)" in out + err and "retrying in" in out + err
    )  # the trigger's backoff


def test_concurrent_steps_share_one_list_per_poll_and_one_describe_per_finished_job(
    aws, ctl, monkeypatch
):
    """Twelve deferred steps in one triggerer loop: batched status, one final describe each."""
    import boto3

    from airflow_stepop.triggers.step_job import StepJobTrigger

    # Jobs end on a timer, no process: the control plane alone is measured. They end once the
    # first poll round has listed them (the epoch in end_file), not a fixed time after their
    # start: on a slow machine that time could pass before the first round (5 s after the
    # triggers start), and one List of no running jobs then passed without any batching.
    end_file = aws["results"] / "end"
    monkeypatch.setenv("STEPOP_FAKE_TIMER_END_FILE", str(end_file))
    ctl.mode("timer")
    client = boto3.client("sagemaker", endpoint_url=aws["fake"])
    stamp, handles = uuid.uuid4().hex[:6], []
    for i in range(12):
        name = f"batch-{stamp}-{i}-t1"
        client.create_training_job(
            TrainingJobName=name, RoleArn=ROLE,
            AlgorithmSpecification={"TrainingImage": BASE, "TrainingInputMode": "File"},
            OutputDataConfig={"S3OutputPath": f"{aws['root']}/{name}"},
            ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1,
                            "VolumeSizeInGB": 1},
            StoppingCondition={"MaxRuntimeInSeconds": 600},
        )  # fmt: skip
        handles.append({"job_id": name, "task_key": name, "run_uri": f"{aws['root']}/{name}",
                        "submitted_at": time.time()})  # fmt: skip
    triggers = [
        StepJobTrigger(
            backend_path="airflow_stepop.backends.sagemaker.backend.SageMakerBackend",
            backend_kwargs={"aws_conn_id": "aws_default", "region_name": None},
            handle=handle,
            poll_interval=0.5,
        )
        for handle in handles
    ]

    async def watch_all() -> list[str]:
        async def one(trigger):
            async for event in trigger.run():
                return event.payload["status"]

        async def end_after_the_first_round() -> None:
            while "ListTrainingJobs" not in await asyncio.to_thread(ctl.counters):
                await asyncio.sleep(0.05)
            end_file.write_text(str(time.time()))

        ender = asyncio.ensure_future(end_after_the_first_round())
        statuses = await asyncio.gather(*(one(t) for t in triggers))
        await ender
        return statuses

    ctl.reset()
    assert asyncio.run(watch_all()) == ["succeeded"] * 12
    counters = ctl.counters()
    assert counters["DescribeTrainingJob"] == 12  # the final facts of each job, nothing more
    # one page per poll round for all twelve jobs (a round with all of them running, and the
    # rounds until they ended), not one describe per job per poll
    assert 2 <= counters["ListTrainingJobs"] < counters["DescribeTrainingJob"]


def test_a_retry_whose_recorded_job_sagemaker_no_longer_has_runs_the_step_again(aws, ctl):
    """SageMaker answers a describe of an unknown name with ValidationException "Requested
    resource not found.": the job is gone, so the retry submits anew instead of failing."""
    import logging

    from airflow_stepop.backends.sagemaker.backend import SageMakerBackend, SageMakerJobConfig
    from airflow_stepop.operators.earlier_try import STATE_KEY, EarlierJob, earlier_job

    backend = SageMakerBackend(
        job=SageMakerJobConfig(role=ROLE, instance_type="ml.m5.large", image_uri=BASE)
    )
    record = {STATE_KEY: {"handle": {"job_id": "sm-deleted-job"}, "try_number": 1}}
    decision = earlier_job(backend, record, 2, "d/r/t/-1", None, logging.getLogger(__name__))
    assert decision == EarlierJob()
