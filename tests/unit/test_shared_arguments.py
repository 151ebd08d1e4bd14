"""Argument rules every operator shares, checked when the DAG is parsed."""

from __future__ import annotations

import pytest
from airflow.sdk import DAG

from airflow_stepop import (
    AzureMLStepOperator,
    LocalStepOperator,
    SageMakerStepOperator,
    VertexStepOperator,
)
from airflow_stepop.settings import DockerSettings, SettingsError

ECR_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/t:1"
OPERATORS = {
    "local": (LocalStepOperator, {}),
    "sagemaker": (SageMakerStepOperator, {"image_uri": ECR_IMAGE}),
    "vertex": (VertexStepOperator, {"image_uri": "us-central1-docker.pkg.dev/p/r/t:1"}),
    "azureml": (AzureMLStepOperator, {"image_uri": "myregistry.azurecr.io/t:1"}),
}  # fmt: skip


def _op(kind: str, environment: object = None, **arguments: object) -> object:
    cls, kwargs = OPERATORS[kind]
    with DAG(f"args_{kind}", schedule=None):
        return cls(task_id="t", python_callable=len, environment=environment, **kwargs, **arguments)


@pytest.mark.parametrize("kind", sorted(OPERATORS))
def test_names_strings_and_templates_are_taken_as_given(kind):
    env = {"DATA_DIR": "/data", "MASTER_PORT": "29600", "PYTHONPATH": "/opt/lib", "DAY": "{{ ds }}"}
    assert _op(kind, env).environment == env


@pytest.mark.parametrize("kind", sorted(OPERATORS))
@pytest.mark.parametrize(
    ("environment", "says"),
    [
        ({"1BAD": "x"}, "environment has the key '1BAD'; names are letters"),
        ({"A": 1}, "environment['A']=1 is refused; values are strings"),
        (["A"], "environment=['A'] must be a dict"),
        ({"STEPOP_OUTPUT_URI": "s3://b/x"}, "Rename yours, e.g. 'MY_STEPOP_OUTPUT_URI'"),
        ({"RANK": "1"}, "'RANK', which every job gets from the step's runtime"),
    ],
)
def test_a_refusal_names_the_operator_the_entry_and_the_fix(kind, environment, says):
    with pytest.raises(SettingsError) as err:
        _op(kind, environment)
    assert says in str(err.value)
    assert str(err.value).startswith(f"{OPERATORS[kind][0].__name__}.environment")


@pytest.mark.parametrize(
    ("kind", "argument"),
    [
        ("sagemaker", "region_name"),
        ("vertex", "project_id"),
        ("vertex", "location"),
        ("vertex", "service_account"),
        ("vertex", "experiment"),
        ("azureml", "compute"),
        ("azureml", "experiment_name"),
    ],
)
def test_a_template_in_an_argument_that_is_not_rendered_is_refused(kind, argument):
    with pytest.raises(SettingsError) as err:
        _op(kind, **{argument: "{{ var.value.x }}"})
    assert f".{argument}='{{{{ var.value.x }}}}' is a template, but {argument} is not" in str(
        err.value
    )


@pytest.mark.parametrize(
    ("kind", "example"),
    [
        ("sagemaker", "'123456789012.dkr.ecr.us-east-1.amazonaws.com/train'"),
        ("vertex", "'us-central1-docker.pkg.dev/my-project/train/env'"),
        ("azureml", "'myregistry.azurecr.io/train'"),
    ],
)
def test_a_bad_image_repository_gets_an_example_of_the_operators_own_registry(kind, example):
    with pytest.raises(SettingsError) as err:
        _op(kind, image_repository="reg.example.com/x:1")
    assert "image_repository='reg.example.com/x:1' is not an image repository" in str(err.value)
    assert f"Use e.g. {example}" in str(err.value)


@pytest.mark.parametrize(
    ("kind", "argument"), [("vertex", "gcp_conn_id"), ("azureml", "azureml_conn_id")]
)
def test_a_connection_id_of_none_is_refused_where_it_has_no_meaning(kind, argument):
    with pytest.raises(SettingsError, match=f"{argument}=None must be an Airflow connection id"):
        _op(kind, **{argument: None})


def test_aws_conn_id_none_means_boto3s_own_credentials():
    assert _op("sagemaker", aws_conn_id=None).aws_conn_id is None


@pytest.mark.parametrize("kind", ["sagemaker", "vertex", "azureml"])
def test_a_prebuilt_image_and_docker_settings_together_are_refused(kind):
    with pytest.raises(SettingsError, match="has both image_uri=.* and docker=: give one"):
        _op(kind, docker=DockerSettings(parent_image="python:3.11-slim", requirements=["numpy"]))


@pytest.mark.parametrize(
    ("kind", "root"), [("sagemaker", "s3://"), ("sagemaker", "s3:///x"), ("vertex", "gs://")]
)
def test_an_artifact_root_without_a_bucket_is_refused(kind, root):
    with pytest.raises(SettingsError, match="URL with a bucket"):
        _op(kind, artifact_root=root)


@pytest.mark.parametrize("kind", sorted(OPERATORS))
def test_deferrable_must_be_a_boolean(kind):
    with pytest.raises(SettingsError, match=r"deferrable='no' must be True or False"):
        _op(kind, deferrable="no")
    assert _op(kind, deferrable=False).deferrable is False


@pytest.mark.parametrize(
    ("kind", "argument", "value"),
    [
        ("local", "max_runtime", -1),
        ("sagemaker", "instance_type", "p3.2xlarge"),
        ("sagemaker", "role", "not a role"),
        ("vertex", "machine_type", "N1 standard"),
        ("vertex", "location", "Europe West"),
        ("azureml", "instance_count", 0),
        ("azureml", "azureml_conn_id", ""),
    ],
)
def test_an_error_names_the_decorator_the_step_was_written_with(kind, argument, value):
    from airflow.sdk import task

    decorator = getattr(task, f"{kind}_step")
    _, kwargs = OPERATORS[kind]
    with DAG(f"decorated_{kind}", schedule=None):

        @decorator(**kwargs, **{argument: value})
        def step():
            return 1

        with pytest.raises(SettingsError) as err:
            step()
    assert str(err.value).startswith(f"@task.{kind}_step.{argument}=")
