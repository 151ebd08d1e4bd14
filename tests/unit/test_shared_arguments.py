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
        return cls(
            task_id="t", python_callable=dict, environment=environment, **kwargs, **arguments
        )


@pytest.mark.parametrize("kind", sorted(OPERATORS))
def test_names_strings_and_templates_are_taken_as_given(kind):
    env = {"DATA_DIR": "/data", "MASTER_PORT": "29600", "PYTHONPATH": "/opt/lib", "DAY": "{{ ds }}"}
    env["PYTHONUNBUFFERED"] = "1"  # what every job gets anyway
    assert _op(kind, env).environment == env


@pytest.mark.parametrize("kind", sorted(OPERATORS))
def test_numbers_and_bools_are_taken_as_their_text_as_in_docker_settings(kind):
    given = {"EPOCHS": 10, "LR": 0.5, "DEBUG": True}
    assert _op(kind, given).environment == {"EPOCHS": "10", "LR": "0.5", "DEBUG": "True"}
    assert DockerSettings(environment=given).environment == _op(kind, given).environment


@pytest.mark.parametrize("kind", sorted(OPERATORS))
@pytest.mark.parametrize(
    ("environment", "says"),
    [
        ({"1BAD": "x"}, "environment has the key '1BAD'; names are letters"),
        ({"A": None}, "environment['A']=None is refused; values are strings"),
        (["A"], "environment=['A'] must be a dict"),
        ({"STEPOP_OUTPUT_URI": "s3://b/x"}, "Rename yours, e.g. 'MY_STEPOP_OUTPUT_URI'"),
        ({"RANK": "1"}, "'RANK', which every job gets from the step's runtime"),
        ({"PYTHONUNBUFFERED": "0"}, "every job runs with PYTHONUNBUFFERED='1', so that"),
    ],
)
def test_a_refusal_names_the_operator_the_entry_and_the_fix(kind, environment, says):
    with pytest.raises(SettingsError) as err:
        _op(kind, environment)
    assert says in str(err.value)
    assert str(err.value).startswith(f"{OPERATORS[kind][0].__name__}(task_id='t').environment")


@pytest.mark.parametrize(
    ("kind", "argument"),
    [
        ("sagemaker", "region_name"),
        ("sagemaker", "instance_type"),
        ("vertex", "machine_type"),
        ("azureml", "instance_type"),
        ("vertex", "project_id"),
        ("vertex", "location"),
        ("vertex", "service_account"),
        ("vertex", "experiment"),
        ("azureml", "compute"),
        ("azureml", "experiment_name"),
        ("azureml", "shm_size"),
        ("sagemaker", "aws_conn_id"),
        ("vertex", "gcp_conn_id"),
        ("azureml", "azureml_conn_id"),
        ("sagemaker", "image_repository"),
        ("vertex", "image_repository"),
        ("azureml", "image_repository"),
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
def test_op_args_must_be_a_list_and_op_kwargs_a_dict(kind):
    with pytest.raises(SettingsError, match=r"op_args=5 must be a list .* e\.g\. op_args=\[5\]"):
        _op(kind, op_args=5)
    with pytest.raises(SettingsError, match=r"op_args='abc' must be a list"):
        _op(kind, op_args="abc")  # not three arguments 'a', 'b', 'c'
    with pytest.raises(SettingsError, match=r"op_kwargs=\[1\] must be a dict"):
        _op(kind, op_kwargs=[1])
    assert _op(kind, op_args=(1,), op_kwargs={"n": 2}).op_args == [1]


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
    assert str(err.value).startswith(f"@task.{kind}_step(task_id='step').{argument}=")


@pytest.mark.parametrize(
    ("kind", "argument"), [("sagemaker", "tags"), ("vertex", "labels"), ("azureml", "tags")]
)
def test_a_template_in_tags_or_labels_is_refused_they_are_not_rendered(kind, argument):
    with pytest.raises(SettingsError) as err:
        _op(kind, **{argument: {"day": "{{ ds }}"}})
    assert f".{argument}['day']='{{{{ ds }}}}' is a template, but {argument} is not" in str(
        err.value
    )


@pytest.mark.parametrize(
    ("kind", "option", "value"),
    [
        ("sagemaker", "sagemaker_default_instance_type", "m5.large"),
        ("vertex", "vertex_default_machine_type", "N1 Standard 4"),
        ("azureml", "azureml_default_instance_type", "DS3_v2"),
    ],
)
def test_a_default_machine_option_that_names_no_machine_fails_the_task_naming_the_option(
    kind, option, value, monkeypatch
):
    monkeypatch.setenv(f"AIRFLOW__STEPOP__{option.upper()}", value)
    monkeypatch.setenv("AIRFLOW__STEPOP__SAGEMAKER_ROLE", "trainer")
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", "s3://bucket/stepop")
    monkeypatch.setenv("AIRFLOW__STEPOP__VERTEX_ARTIFACT_ROOT", "gs://bucket/stepop")
    monkeypatch.setenv("AIRFLOW__STEPOP__AZUREML_ARTIFACT_ROOT", "abfs://container/stepop")
    step = _op(kind)  # the DAG file still parses: the option is read when the task runs
    with pytest.raises(SettingsError) as err:
        step.make_backend()
    assert str(err.value).startswith(f"[stepop] {option}={value!r} is not")


@pytest.mark.parametrize("kind", sorted(OPERATORS))
def test_a_template_in_the_artifact_root_is_refused_it_is_not_rendered(kind):
    root = {"local": "file:///data/{{ ds }}", "sagemaker": "s3://b/{{ ds }}",
            "vertex": "gs://b/{{ ds }}", "azureml": "abfs://c/{{ ds }}"}[kind]  # fmt: skip
    with pytest.raises(SettingsError) as err:
        _op(kind, artifact_root=root)
    assert f".artifact_root={root!r} is a template, but artifact_root is not rendered" in str(
        err.value
    )


@pytest.mark.parametrize(
    ("kind", "argument", "lacking", "fitting"),
    [
        ("sagemaker", "instance_type", {"instance_type": "ml.m5.large"},
         {"instance_type": "ml.g4dn.12xlarge"}),
        ("vertex", "machine_type", {"machine_type": "n1-standard-16"},
         {"machine_type": "n1-standard-16", "accelerator_type": "NVIDIA_TESLA_T4",
          "accelerator_count": 2}),
        ("azureml", "instance_type", {"instance_type": "Standard_DS3_v2"},
         {"instance_type": "Standard_NC64as_T4_v3"}),
    ],
)  # fmt: skip
def test_an_explicit_machine_lacking_what_resources_asks_for_is_refused(
    kind, argument, lacking, fitting
):
    from airflow_stepop import ResourceSettings

    gpus = ResourceSettings(gpu_count=2, gpu_type="T4")
    with pytest.raises(SettingsError) as err:
        _op(kind, resources=gpus, **lacking)
    assert f".{argument}={lacking[argument]!r} is " in str(err.value)
    assert "no GPU" in str(err.value) and f"Drop {argument}" in str(err.value)
    _op(kind, resources=gpus, **fitting)  # wins over resources: no smaller type is chosen


@pytest.mark.parametrize(
    "catalog_name", ["airflow_stepop.backends.sagemaker", "airflow_stepop.backends.azureml"]
)
def test_a_catalogs_families_without_gpus_are_exactly_its_rows_without_gpus(catalog_name):
    """The pattern judges the types the catalog does not list: it must agree with every row it
    does (a new GPU family matched by it would refuse every request for its GPUs)."""
    from airflow_stepop.catalog import load

    catalog = load(catalog_name)
    assert catalog.no_gpu_types
    disagree = [
        name
        for m in catalog.types
        for name in (m.name, m.name.lower())  # any case: Azure ML takes sizes so
        if catalog.named_without_gpu(name) != (m.gpu_count == 0)
    ]
    assert disagree == []


@pytest.mark.parametrize(
    ("kind", "uncatalogued_cpu_type", "uncatalogued_gpu_type"),
    [
        ("sagemaker", "ml.c5n.xlarge", "ml.g7.xlarge"),
        ("azureml", "Standard_HB120rs_v3", "Standard_ND96isr_H200_v5"),
    ],
)
def test_a_gpu_request_beside_an_uncatalogued_type_of_a_family_without_gpus_is_refused(
    kind, uncatalogued_cpu_type, uncatalogued_gpu_type
):
    """The catalog cannot list every type, but the name says which families have no GPU: the
    step must not run on a CPU machine while its resources ask for a GPU."""
    from airflow_stepop import ResourceSettings
    from airflow_stepop.backends.azureml import config as azureml_config
    from airflow_stepop.backends.sagemaker import config as sagemaker_config
    from airflow_stepop.catalog import load

    catalog = load({"sagemaker": sagemaker_config, "azureml": azureml_config}[kind].CATALOG)
    assert catalog.get(uncatalogued_cpu_type) is None  # pick others if these are added
    assert catalog.get(uncatalogued_gpu_type) is None
    gpu = ResourceSettings(gpu_count=1)
    with pytest.raises(SettingsError) as err:
        _op(kind, resources=gpu, instance_type=uncatalogued_cpu_type)
    assert f"instance_type={uncatalogued_cpu_type!r} is of a family with no GPU" in str(err.value)
    assert "Drop instance_type" in str(err.value)
    _op(kind, resources=ResourceSettings(cpu_count=2), instance_type=uncatalogued_cpu_type)
    _op(kind, resources=gpu, instance_type=uncatalogued_gpu_type)  # taken as given


@pytest.mark.parametrize(
    ("kind", "root", "bucket"),
    [
        ("sagemaker", "s3://My_Bucket/x", "My_Bucket"),
        ("vertex", "gs://Bad_Bucket!/x", "Bad_Bucket!"),
        ("vertex", f"gs://{'b' * 64}/x", "b" * 64),  # 63 at most without dots
        ("vertex", f"gs://a.{'b' * 64}.c/x", f"a.{'b' * 64}.c"),  # and between dots
    ],
)
def test_an_artifact_root_whose_bucket_name_the_store_refuses_is_refused(kind, root, bucket):
    with pytest.raises(SettingsError) as err:
        _op(kind, artifact_root=root)
    assert f"{bucket!r} is not a bucket name" in str(err.value)


def test_a_long_dotted_gcs_bucket_name_is_taken():
    _op("vertex", artifact_root=f"gs://{'.'.join(['b' * 60] * 3)}/x")  # 182 characters


@pytest.mark.parametrize(
    ("kind", "typo", "meant"),
    [
        ("local", "max_runtim", "max_runtime"),
        ("sagemaker", "instance_typ", "instance_type"),
        ("vertex", "machine_typ", "machine_type"),
        ("azureml", "computer", "compute"),
        ("azureml", "retry", "retries"),  # BaseOperator's own arguments are suggested too
    ],
)
def test_a_misspelt_argument_is_named_with_the_one_meant(kind, typo, meant):
    with pytest.raises(TypeError) as err:
        _op(kind, **{typo: 1})
    assert f"got arguments it does not take: {typo}= (did you mean {meant}=?)" in str(err.value)


@pytest.mark.parametrize(
    ("kind", "written", "meant"),
    [
        ("vertex", "instance_count", "replica_count="),  # SageMaker's name on Vertex AI
        ("sagemaker", "replica_count", "instance_count="),
        ("azureml", "num_nodes", "instance_count="),
        ("local", "requirements", "docker=DockerSettings(requirements=...)"),
        ("sagemaker", "apt_packages", "docker=DockerSettings(apt_packages=...)"),
        ("local", "image_uri", "docker=DockerSettings(parent_image=...)"),
        ("local", "python_version", "docker=DockerSettings(parent_image=...)"),
    ],
)
def test_another_tool_s_name_for_an_argument_is_named_with_ours(kind, written, meant):
    """No spelling is close to these: the hint comes from what the name means."""
    with pytest.raises(TypeError) as err:
        _op(kind, **{written: ["x"]})
    assert f"got arguments it does not take: {written}= (did you mean {meant}?)" in str(err.value)


def test_an_unknown_argument_of_an_operator_of_another_package_points_at_its_own_docs():
    """A backend of one's own (docs/write-a-backend.md) has no page in our docs: the error
    names where its arguments are said instead."""
    from airflow_stepop import LocalStepOperator

    class SpoolStepOperator(LocalStepOperator):
        pass

    SpoolStepOperator.__module__ = "spooljobs"
    with pytest.raises(TypeError) as err:
        SpoolStepOperator(task_id="t", python_callable=print, spool_dirr="/x")
    assert "help(SpoolStepOperator) in spooljobs" in str(err.value)
    assert "docs/<service>.md" not in str(err.value)
    with pytest.raises(TypeError, match=r"docs/<service>\.md"):
        LocalStepOperator(task_id="t", python_callable=print, spool_dirr="/x")


def test_errors_in_a_task_group_name_the_task_id_airflow_shows():
    """Airflow prefixes a grouped task's id with its group's; the errors say the same id."""
    from airflow.sdk import TaskGroup

    cls, kwargs = OPERATORS["local"]
    with DAG("grouped", schedule=None), TaskGroup("train"):
        with pytest.raises(TypeError, match=r"\(task_id='train\.fit'\) got arguments it"):
            cls(task_id="fit", python_callable=dict, max_runtim=1, **kwargs)
        with pytest.raises(SettingsError, match=r"\(task_id='train\.fit'\)\.max_runtime="):
            cls(task_id="fit", python_callable=dict, max_runtime="soon", **kwargs)


CPU_ONLY = {
    "sagemaker": {"instance_type": "ml.m5.large"},
    "vertex": {"machine_type": "n1-standard-16"},
    "azureml": {"instance_type": "Standard_DS3_v2"},
}


@pytest.mark.parametrize("kind", ["sagemaker", "vertex", "azureml"])
def test_resources_shared_in_default_args_are_named_as_written_when_nothing_fits(kind):
    """The task line that fails has no resources=: the error points at default_args."""
    from airflow_stepop import ResourceSettings
    from airflow_stepop.catalog import NoFittingMachineError

    cls, kwargs = OPERATORS[kind]
    shared = ResourceSettings(gpu_count=64)
    dag = DAG(f"shared_{kind}", schedule=None, default_args={"step_resources": shared})
    with dag, pytest.raises(NoFittingMachineError) as err:
        cls(task_id="t", python_callable=dict, **kwargs)
    assert str(err.value).startswith(
        f"{cls.__name__}(task_id='t').default_args['step_resources']="
        "ResourceSettings(gpu_count=64) fits no"
    )
    with dag, pytest.raises(NoFittingMachineError) as err:
        cls(task_id="explicit", python_callable=dict, **kwargs, **CPU_ONLY[kind])
    assert "lacks what default_args['step_resources']=ResourceSettings(gpu_count=64)" in str(
        err.value
    )
    with DAG(f"own_{kind}", schedule=None), pytest.raises(NoFittingMachineError) as err:
        cls(task_id="t", python_callable=dict, resources=shared, **kwargs)
    assert str(err.value).startswith(
        f"{cls.__name__}(task_id='t').resources=ResourceSettings(gpu_count=64)"
    )


def test_a_templated_poll_interval_is_refused_as_a_template_not_as_a_wrong_number():
    with pytest.raises(SettingsError) as err:
        _op("local", poll_interval="{{ params.poll }}")
    assert "poll_interval='{{ params.poll }}' is a template, but poll_interval is not rendered" in (
        str(err.value)
    )
