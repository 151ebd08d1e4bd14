"""SageMakerStepOperator's arguments: each wrong value is refused at DAG parse time, by name."""

from __future__ import annotations

from datetime import timedelta

import pytest
from airflow.sdk import DAG

from airflow_stepop import ResourceSettings, SageMakerStepOperator
from airflow_stepop.settings import SettingsError

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1"


def _op(**kwargs):
    kwargs.setdefault("image_uri", IMAGE)
    with DAG("sm_args", schedule=None):
        return SageMakerStepOperator(task_id="t", python_callable=dict, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"role": "not a role!"}, ["role='not a role!'", "ARN"]),
        ({"aws_conn_id": "bad id"}, ["aws_conn_id='bad id'", "aws_default"]),
        ({"region_name": "Mars"}, ["region_name='Mars'", "us-east-1"]),
        ({"instance_type": "p3.2xlarge"}, ["instance_type='p3.2xlarge'", "ml."]),
        ({"instance_type": "{{ params.it }}"}, ["instance_type='{{ params.it }}'", "template"]),
        ({"instance_count": 0}, ["instance_count=0", "1 to 100"]),
        ({"instance_count": True}, ["instance_count=True"]),
        ({"volume_size_gb": 0}, ["volume_size_gb=0", "1 to 16384"]),
        ({"max_runtime": "2h"}, ["max_runtime='2h'", "timedelta"]),
        ({"max_runtime": timedelta(days=40)}, ["max_runtime=", "1..2419200"]),
        ({"spot": "yes"}, ["spot='yes'", "True or False"]),
        ({"max_wait": 3600}, ["max_wait=3600", "spot=True"]),
        (
            {"spot": True, "max_runtime": 7200, "max_wait": 3600},
            ["max_wait=3600", "max_runtime=7200"],
        ),
        ({"keep_alive": 7200}, ["keep_alive=7200", "0..3600"]),
        ({"subnets": "subnet-0123abcd"}, ["subnets='subnet-0123abcd'", "list"]),
        ({"subnets": ["subnet-0123abcd"]}, ["security_group_ids=None", "both"]),
        (
            {"subnets": ["subnet-0123abcd"], "security_group_ids": ["group"]},
            ["security_group_ids has 'group'", "sg-"],
        ),
        ({"volume_kms_key": "bad key!"}, ["volume_kms_key='bad key!'", "alias/"]),
        ({"output_kms_key": 5}, ["output_kms_key=5", "KMS"]),
        ({"tags": ["a"]}, ["tags=['a']", "dict"]),
        ({"tags": {"aws:x": "1"}}, ["'aws:x'", "may not start with 'aws:'"]),
        ({"tags": {"AWS:owner": "me"}}, ["'AWS:owner'", "'aws:' (in any case)"]),
        ({"tags": {"team": 1}}, ["tags['team']=1", "string"]),
        ({"tags": {"team": "a,b;c!"}}, ["tags['team']='a,b;c!'", "_.:/=+-@"]),
        ({"tags": {"day": "{{ ds }}"}}, ["tags['day']='{{ ds }}' is a template", "not rendered"]),
        ({"tags": {"airflow-dag-id": "mine"}}, ["'airflow-dag-id'", "reserved", "Rename"]),
        ({"tags": {"Airflow-Team": "x"}}, ["'Airflow-Team'", "reserved"]),
        (
            {"tags": {f"t{i}": "v" for i in range(47)}},
            ["tags has 47 tags", "at most 46", "50 per job", "airflow-*"],
        ),
        ({"image_uri": "bad image!"}, ["image_uri='bad image!'", "dkr.ecr"]),
        ({"image_uri": None}, ["needs an image", "image_uri=", "docker=DockerSettings"]),
        ({"image_repository": "noslash"}, ["image_repository='noslash'", "dkr.ecr"]),
        ({"image_repository": "reg:5000/repo:tag"}, ["image_repository=", "no tag"]),
        ({"artifact_root": "gs://bucket/x"}, ["artifact_root='gs://bucket/x'", "s3://"]),
    ],
)
def test_a_wrong_argument_is_refused_naming_field_value_and_fix(kwargs, words):
    with pytest.raises(SettingsError) as err:
        _op(**kwargs)
    message = str(err.value)
    for word in words:
        assert word in message, message


def test_resources_resolve_to_the_cheapest_type_and_an_explicit_type_wins():
    assert _op(resources=ResourceSettings(gpu_count=1, memory="16GiB")).sagemaker.instance_type == (
        "ml.g4dn.xlarge"
    )
    explicit = _op(resources=ResourceSettings(gpu_count=1), instance_type="ml.p3.2xlarge")
    assert explicit.sagemaker.instance_type == "ml.p3.2xlarge"


def test_max_runtime_defaults_to_execution_timeout_plus_a_grace_and_spot_waits_twice_as_long(
    monkeypatch,
):
    monkeypatch.setenv("AIRFLOW__STEPOP__SAGEMAKER_ROLE", "stepop-role")
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", "s3://bucket/stepop")
    # 5 minutes past the deadline: the trigger stops the job first (AirflowTaskTimeout), and
    # MaxRuntimeInSeconds only ends a job nobody watches
    job = _op(execution_timeout=timedelta(minutes=90), spot=True)._job_config()
    assert job.max_runtime_s == 5700 and job.max_wait_s == 11400
    assert job.instance_type == "ml.m5.large"  # [stepop] sagemaker_default_instance_type
    assert job.role == "stepop-role"
    assert _op()._job_config().max_runtime_s == 24 * 3600
    longest = _op(execution_timeout=timedelta(days=28))._job_config()
    assert longest.max_runtime_s == 28 * 24 * 3600  # SageMaker's maximum
    # the user's own service-side limit is kept as given, even below the task's deadline
    own = _op(execution_timeout=timedelta(minutes=90), max_runtime=600)._job_config()
    assert own.max_runtime_s == 600


def test_a_missing_role_or_a_non_s3_root_is_refused_before_any_call(monkeypatch):
    monkeypatch.setenv("AIRFLOW__STEPOP__SAGEMAKER_ROLE", "")
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", "s3://bucket/stepop")
    with pytest.raises(SettingsError, match=r"role is not set.*sagemaker_role"):
        _op()._job_config()
    monkeypatch.setenv("AIRFLOW__STEPOP__SAGEMAKER_ROLE", "r")
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", "file:///tmp/x")
    with pytest.raises(SettingsError, match=r"s3:// artifact root, but it is 'file:///tmp/x'"):
        _op()._job_config()


def test_a_default_instance_type_that_is_not_one_names_the_option(monkeypatch):
    monkeypatch.setenv("AIRFLOW__STEPOP__SAGEMAKER_ROLE", "r")
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", "s3://bucket/stepop")
    monkeypatch.setenv("AIRFLOW__STEPOP__SAGEMAKER_DEFAULT_INSTANCE_TYPE", "m5.large")
    with pytest.raises(SettingsError) as err:
        _op()._job_config()
    assert str(err.value).startswith("[stepop] sagemaker_default_instance_type='m5.large' is not")
    assert _op(instance_type="ml.m5.large")._job_config().instance_type == "ml.m5.large"


@pytest.mark.parametrize(
    ("instance_type", "default", "named"),
    [
        (
            "ml.m5.huge",
            "ml.m5.large",
            "SageMakerStepOperator(task_id='t').instance_type='ml.m5.huge'",
        ),
        (None, "ml.g5.xlarg", "[stepop] sagemaker_default_instance_type='ml.g5.xlarg'"),
    ],
)
def test_an_instance_type_the_service_does_not_have_is_refused_before_any_call(
    monkeypatch, instance_type, default, named
):
    """Not in our catalog and not in the API's own list: a typo. It failed as a bare
    ClientError at CreateTrainingJob, after the image build and the uploads."""
    monkeypatch.setenv("AIRFLOW__STEPOP__SAGEMAKER_ROLE", "r")
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", "s3://bucket/stepop")
    monkeypatch.setenv("AIRFLOW__STEPOP__SAGEMAKER_DEFAULT_INSTANCE_TYPE", default)
    with pytest.raises(SettingsError) as err:
        _op(instance_type=instance_type)._job_config()
    assert str(err.value).startswith(f"{named} is not a SageMaker training instance type")
    assert "the closest: 'ml." in str(err.value)


def test_an_instance_type_newer_than_the_catalog_is_taken_if_the_service_lists_it(monkeypatch):
    monkeypatch.setenv("AIRFLOW__STEPOP__SAGEMAKER_ROLE", "r")
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", "s3://bucket/stepop")
    from airflow_stepop.backends.sagemaker.config import CATALOG
    from airflow_stepop.catalog import load as load_catalog

    assert load_catalog(CATALOG).get("ml.c5n.xlarge") is None  # pick another if it is added
    assert _op(instance_type="ml.c5n.xlarge")._job_config().instance_type == "ml.c5n.xlarge"


def test_a_service_artifact_root_lets_local_and_cloud_steps_share_a_deployment(monkeypatch):
    from airflow_stepop import LocalStepOperator

    monkeypatch.setenv("AIRFLOW__STEPOP__SAGEMAKER_ROLE", "r")
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", "file:///tmp/stepop")
    monkeypatch.setenv("AIRFLOW__STEPOP__SAGEMAKER_ARTIFACT_ROOT", "s3://bucket/stepop")
    assert _op().step_artifact_root() == "s3://bucket/stepop"
    _op()._job_config()  # an s3:// root: accepted
    with DAG("mixed", schedule=None):
        local = LocalStepOperator(task_id="l", python_callable=dict)
    assert local.step_artifact_root() == "file:///tmp/stepop"
    assert _op(artifact_root="s3://other/x").step_artifact_root() == "s3://other/x"
    monkeypatch.setenv("AIRFLOW__STEPOP__SAGEMAKER_ARTIFACT_ROOT", "gs://b/x")
    with pytest.raises(SettingsError, match=r"\[stepop\] sagemaker_artifact_root, or \[stepop\]"):
        _op()._job_config()


def test_the_decorator_is_registered_with_airflow():
    from airflow.sdk import task

    assert callable(task.sagemaker_step)


def test_the_airflow_tags_are_always_on_the_job_beside_as_many_user_tags_as_fit(monkeypatch):
    from airflow_stepop.backends.base import JobRequest
    from airflow_stepop.backends.sagemaker.backend import SageMakerBackend

    monkeypatch.setenv("AIRFLOW__STEPOP__SAGEMAKER_ROLE", "r")
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", "s3://bucket/stepop")
    user = {f"team-{i:02d}": "v" for i in range(46)}  # sorted after "airflow-*", the most allowed
    backend = SageMakerBackend(job=_op(tags=user)._job_config())
    labels = {"dag_id": "d", "task_id": "t", "run_id": "manual__x", "map_index": "-1"}
    request = JobRequest("j", "d/r/t/-1", "s3://b/s", "s3://b/r", "s3://b/c", labels=labels)
    tags = {tag["Key"]: tag["Value"] for tag in backend._tags(request)}
    assert len(tags) == 50  # SageMaker's limit, none cut
    assert tags["airflow-dag-id"] == "d" and tags["airflow-map-index"] == "-1"
    assert tags["airflow-task-id"] == "t" and tags["airflow-run-id"] == "manual__x"
    assert all(tags[key] == "v" for key in user)
