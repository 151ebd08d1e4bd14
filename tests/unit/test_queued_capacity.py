"""Queued capacity: Vertex AI's FLEX_START, SageMaker training plans and Azure ML's job queue.
What reaches the request, what is refused at parse, and which statuses are "queued"."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest
from airflow.sdk import DAG

from airflow_stepop import (
    AzureMLStepOperator,
    DockerSettings,
    LocalStepOperator,
    ResourceSettings,
    SageMakerStepOperator,
    VertexStepOperator,
)
from airflow_stepop.backends.azureml.launch import map_status as azureml_status
from airflow_stepop.backends.base import JobRequest
from airflow_stepop.backends.sagemaker.job import map_status as sagemaker_status
from airflow_stepop.backends.vertex.backend import VertexBackend
from airflow_stepop.backends.vertex.job import build_job
from airflow_stepop.setting_values import SettingsError

PLAN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p5-week"
ROLE = "arn:aws:iam::123456789012:role/stepop"
VERTEX_IMAGE = "us-central1-docker.pkg.dev/my-project/train/env:1"
PARENT = DockerSettings(parent_image="python:3.11-slim")


def fit(n):
    return n


def _sagemaker(**kwargs):
    return SageMakerStepOperator(task_id="fit", python_callable=fit, op_args=[1], role=ROLE,
                                 artifact_root="s3://bucket/root", docker=PARENT,
                                 **kwargs)  # fmt: skip


def _vertex(**kwargs):
    kwargs.setdefault("image_uri", VERTEX_IMAGE)
    with DAG("vx_queued", schedule=None):
        return VertexStepOperator(task_id="t", python_callable=dict, **kwargs)


def _azureml(**kwargs):
    return AzureMLStepOperator(task_id="fit", python_callable=fit, op_args=[1],
                               artifact_root="abfs://container/root", docker=PARENT,
                               **kwargs)  # fmt: skip


# --- SageMaker: a training plan -------------------------------------------------------------


def test_a_training_plan_reaches_the_request_with_its_instance_type():
    op = _sagemaker(instance_type="ml.p5.48xlarge", training_plan_arn=PLAN)
    assert op.sagemaker.training_plan_arn == PLAN
    assert op.sagemaker.fallback_types == ()  # a plan's job waits; it does not fail over


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"instance_type": "ml.p5.48xlarge", "training_plan_arn": "p5-week"},
         ["training_plan_arn='p5-week' is not a SageMaker training plan ARN", PLAN]),
        ({"resources": ResourceSettings(gpu_count=8, gpu_type="H100"), "training_plan_arn": PLAN},
         ["needs instance_type=", "instances of one type"]),
        ({"instance_type": "ml.p5.48xlarge", "training_plan_arn": PLAN,
          "fallback_types": ["ml.p4d.24xlarge"]},
         ["fallback_types=['ml.p4d.24xlarge'] with training_plan_arn=", "Drop fallback_types"]),
    ],
)  # fmt: skip
def test_a_wrong_training_plan_fails_the_dag_import_naming_it(kwargs, words):
    with pytest.raises(SettingsError) as err:
        _sagemaker(**kwargs)
    assert all(word in str(err.value) for word in words), str(err.value)


def test_a_training_plan_job_pending_is_queued_for_capacity_and_starting_is_not():
    waiting = {"TrainingJobStatus": "InProgress", "SecondaryStatus": "Pending"}
    assert sagemaker_status(waiting).queued and sagemaker_status(waiting).state == "pending"
    starting = {"TrainingJobStatus": "InProgress", "SecondaryStatus": "Starting"}
    assert not sagemaker_status(starting).queued


# --- Vertex AI: Dynamic Workload Scheduler --------------------------------------------------


def _body(job):
    request = JobRequest(
        job_name="dag-task-0123456789-t1", task_key="dag/run/task/-1",
        spec_uri="gs://bucket/r/spec.json", run_uri="gs://bucket/r",
        code_uri="gs://bucket/code/abc.zip", spec_sha256="f" * 64, code_sha256="abc",
    )  # fmt: skip
    return build_job(request, {"args": [], "kwargs": {}}, job, "img", "p", "us-central1", b"")


def test_flex_start_reaches_the_request_with_its_maximum_wait():
    job = _vertex(machine_type="g2-standard-8", flex_start=True,
                  flex_start_max_wait=timedelta(hours=6)).job_config  # fmt: skip
    scheduling = _body(job)["job_spec"]["scheduling"]
    assert scheduling["strategy"] == "FLEX_START"
    assert scheduling["max_wait_duration"] == "21600s"
    default = _vertex(machine_type="g2-standard-8", flex_start=True).job_config
    assert "max_wait_duration" not in _body(default)["job_spec"]["scheduling"]  # Vertex's day
    forever = _vertex(machine_type="g2-standard-8", flex_start=True, flex_start_max_wait=0)
    assert _body(forever.job_config)["job_spec"]["scheduling"]["max_wait_duration"] == "0s"


def test_flex_start_from_resources_picks_the_cheapest_machine_whose_gpus_queue():
    """A T4 would be cheapest for one GPU, but Dynamic Workload Scheduler does not queue T4s:
    the step gets an L4 and fails over only to machines that queue too."""
    job = _vertex(resources=ResourceSettings(gpu_count=1), flex_start=True).job_config
    assert job.accelerator_type == "NVIDIA_L4"
    plain = _vertex(resources=ResourceSettings(gpu_count=1)).job_config
    assert plain.accelerator_type == "NVIDIA_TESLA_T4"
    queueing = ("NVIDIA_L4", "NVIDIA_TESLA_A100", "NVIDIA_A100_80GB", "NVIDIA_H100_80GB",
                "NVIDIA_H100_MEGA_80GB", "NVIDIA_H200_141GB", "NVIDIA_B200")  # fmt: skip
    assert job.fallback_types
    assert all(name.split("+")[1].rsplit("x", 1)[0] in queueing for name in job.fallback_types)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"machine_type": "g2-standard-8", "flex_start_max_wait": 3600},
         ["flex_start_max_wait=3600 applies to FLEX_START jobs only", "set flex_start=True"]),
        ({"machine_type": "g2-standard-8", "flex_start": True, "spot": True},
         ["spot=True and flex_start=True", "Drop one"]),
        ({"machine_type": "g2-standard-8", "flex_start": True,
          "persistent_resource_id": "warm-pool"},
         ["persistent_resource_id='warm-pool'", "does not queue"]),
        ({"machine_type": "g2-standard-8", "flex_start": True, "max_runtime": timedelta(days=8)},
         ["at most 7 days", "691200 s"]),
        ({"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4",
          "flex_start": True},
         ["'n1-standard-8+NVIDIA_TESLA_T4x1' has none of them", "g2-standard-8"]),
        ({"machine_type": "g2-standard-8", "flex_start": True,
          "fallback_types": ["n1-standard-8+NVIDIA_TESLA_T4x1"]},
         ["fallback_types[0]='n1-standard-8+NVIDIA_TESLA_T4x1' has no L4, A100"]),
        ({"machine_type": "g2-standard-8", "flex_start": True, "flex_start_max_wait": -1},
         ["flex_start_max_wait=-1", "0: no limit"]),
    ],
)  # fmt: skip
def test_a_step_that_cannot_queue_fails_the_dag_import_naming_why(kwargs, words):
    with pytest.raises(SettingsError) as err:
        _vertex(**kwargs)
    assert all(word in str(err.value) for word in words), str(err.value)


def _listed(state, strategy):
    return SimpleNamespace(
        name="projects/p/locations/l/customJobs/1",
        state=SimpleNamespace(name=state),
        error=SimpleNamespace(message="", code=0),
        job_spec=SimpleNamespace(scheduling=SimpleNamespace(strategy=SimpleNamespace(
            name=strategy)), worker_pool_specs=[]),
    )  # fmt: skip


def test_a_pending_flex_start_job_is_queued_for_capacity_and_a_plain_pending_one_is_not():
    backend = VertexBackend()
    assert backend._status(_listed("JOB_STATE_PENDING", "FLEX_START")).queued
    assert not backend._status(_listed("JOB_STATE_PENDING", "STRATEGY_UNSPECIFIED")).queued
    assert not backend._status(_listed("JOB_STATE_RUNNING", "FLEX_START")).queued


# --- Azure ML: the job queue ----------------------------------------------------------------


def test_a_job_priority_is_checked_and_a_queued_job_is_queued_for_capacity():
    assert _azureml(instance_type="Standard_NC6s_v3", job_priority="high").azureml.job_priority
    with pytest.raises(SettingsError, match=r"job_priority='urgent' is not an Azure ML job "
                       r"priority; use one of 'low', 'medium', 'high'"):  # fmt: skip
        _azureml(instance_type="Standard_NC6s_v3", job_priority="urgent")
    assert azureml_status("Queued").queued
    assert not azureml_status("Preparing").queued


# --- one service's option on another's operator -------------------------------------------


@pytest.mark.parametrize(
    ("make", "kwargs", "words"),
    [
        (_sagemaker, {"instance_type": "ml.g5.xlarge", "flex_start": True},
         ["flex_start=True (an argument of VertexStepOperator, not of SageMakerStepOperator; "
          "its way to queue for capacity is training_plan_arn=)"]),
        (_azureml, {"instance_type": "Standard_NC6s_v3", "training_plan_arn": PLAN},
         [f"training_plan_arn={PLAN!r} (an argument of SageMakerStepOperator", "job_priority="]),
        (lambda **kw: LocalStepOperator(task_id="fit", python_callable=fit, op_args=[1], **kw),
         {"job_priority": "high"},
         ["job_priority='high' (an argument of AzureMLStepOperator, not of LocalStepOperator)"]),
    ],
)  # fmt: skip
def test_another_services_queue_option_is_refused_naming_whose_it_is(make, kwargs, words):
    with pytest.raises(TypeError) as err:
        make(**kwargs)
    assert all(word in str(err.value) for word in words), str(err.value)


@pytest.mark.parametrize(
    ("page", "containing", "task_type"),
    [
        ("docs/sagemaker.md", "training_plan_arn=", "SageMakerStepDecoratedOperator"),
        ("docs/vertex.md", "flex_start=True", "VertexStepDecoratedOperator"),
        ("docs/azureml.md", 'job_priority="high"', "AzureMLStepDecoratedOperator"),
    ],
)
def test_the_docs_queue_examples_make_the_step_they_show(page, containing, task_type):
    """Each page's example, with the imports a DAG file has and a call of its function in a
    DAG, parses into its step: a wrong name or value in it would fail here."""
    import re

    from tests.doc_blocks import python_block

    code = python_block(page, containing)
    function = re.search(r"^def (\w+)\(", code, re.M).group(1)
    body = "".join(f"    {line}\n" for line in [*code.splitlines(), f"{function}()"])
    namespace: dict = {}
    exec(  # a user's DAG file: the example under its imports, inside a DAG
        "from datetime import timedelta\nfrom airflow.sdk import DAG, task\n"
        "from airflow_stepop import DockerSettings, ResourceSettings\n"
        f"with DAG('queued_docs', schedule=None) as dag:\n{body}",
        namespace,
    )
    (step,) = namespace["dag"].task_dict.values()
    assert type(step).__name__ == task_type


def test_an_unknown_sagemaker_region_fails_the_dag_import_with_the_closest():
    assert _sagemaker(instance_type="ml.g5.xlarge", region_name="eu-west-1")
    with pytest.raises(SettingsError, match=r"region_name='us-est-1' is not a region SageMaker is "
                       r"in \(botocore .* lists \d+\); the closest: .*'us-east-1'"):  # fmt: skip
        _sagemaker(instance_type="ml.g5.xlarge", region_name="us-est-1")
