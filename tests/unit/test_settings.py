"""ResourceSettings and DockerSettings refuse wrong values at construction (DAG parse time)."""

from __future__ import annotations

import pytest

from airflow_stepop import DockerSettings, ResourceSettings
from airflow_stepop.setting_values import parse_memory
from airflow_stepop.settings import SettingsError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8GB", 8 * 10**9),
        ("8GiB", 8 * 2**30),
        ("8Gi", 8 * 2**30),
        ("512MiB", 512 * 2**20),
        ("1.5GiB", int(1.5 * 2**30)),
        (4 * 2**30, 4 * 2**30),
        (" 16 gib ", 16 * 2**30),
    ],
)
def test_memory_accepts_the_documented_forms(text, expected):
    assert parse_memory(text) == expected
    assert ResourceSettings(memory=text).memory == expected


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("16GB", "16GB"),
        ("8GiB", "8GiB"),
        ("512MiB", "512MiB"),
        ("250MB", "250MB"),
        ("1.5GiB", "1536MiB"),
    ],
)
def test_memory_is_shown_in_messages_in_the_unit_it_was_written_in(given, shown):
    """Errors quote a step's resources: 16GB is not shown as 14.9012GiB."""
    assert ResourceSettings(memory=given).shown() == f"ResourceSettings(memory={shown!r})"


@pytest.mark.parametrize("bad", ["8 parsecs", "", "GiB", -1, 0, True, "0.1B", 3.5, "8 GiBs"])
def test_memory_refuses_other_values_naming_field_and_fix(bad):
    with pytest.raises(SettingsError) as err:
        ResourceSettings(memory=bad)
    assert "ResourceSettings.memory" in str(err.value)
    assert repr(bad) in str(err.value)


@pytest.mark.parametrize(
    ("value", "fix"),
    [
        (16, "'16GiB' (or '16GB')"),
        ("16", "'16GiB'"),
        ("512KiB", "'512MiB'"),
        (1048575, "Give at least '1MiB'"),  # not '1048575GiB', a petabyte
    ],
)
def test_memory_too_small_for_any_step_is_refused_with_the_unit_it_lacks(value, fix):
    """memory=16 meant 16 GiB, not 16 bytes (it picked the smallest machine, or docker
    refused it with a bare API error)."""
    with pytest.raises(SettingsError, match="too little for any step") as err:
        ResourceSettings(memory=value)
    assert fix in str(err.value)


@pytest.mark.parametrize(
    ("settings", "kwargs", "hint"),
    [
        (ResourceSettings, {"memroy": "8GiB"}, "'memroy' (did you mean memory=?)"),
        (DockerSettings, {"requirement": ["numpy"]}, "'requirement' (did you mean requirements=?)"),
        (
            ResourceSettings,
            {"node_count": 2},  # was "did you mean gpu_count=?"
            "'node_count' (the number of machines is the operator's argument: instance_count= "
            "on SageMaker and Azure ML, replica_count= on Vertex AI)",
        ),
    ],
)
def test_a_misspelt_settings_field_is_named_with_the_closest_one(settings, kwargs, hint):
    with pytest.raises(SettingsError) as err:
        settings(**kwargs)
    assert f"{settings.__name__} has no field {hint}" in str(err.value)


def test_a_string_where_a_list_belongs_is_refused_with_the_list_it_meant():
    with pytest.raises(SettingsError, match=r"e\.g\. \['numpy', 'pandas'\]"):
        DockerSettings(requirements="numpy pandas")


@pytest.mark.parametrize(("text", "fix"), [("8G", "'8GB'"), ("512m", "'512MiB'"), ("1T", "'1TB'")])
def test_memory_refuses_units_that_mean_different_things_to_docker_and_kubernetes(text, fix):
    with pytest.raises(SettingsError, match="ambiguous") as err:
        ResourceSettings(memory=text)
    assert fix in str(err.value)


def test_gpu_type_alone_means_one_gpu_of_that_model():
    assert ResourceSettings(gpu_type="L4").gpu_count == 1
    assert ResourceSettings(gpu_type="L4", gpu_count=4).gpu_count == 4


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"cpu_count": 0}, "cpu_count"),
        ({"cpu_count": 2.5}, "cpu_count"),
        ({"gpu_count": -1}, "gpu_count"),
        ({"gpu_count": "1"}, "gpu_count"),
        ({"gpu_type": "A100 80GB"}, "gpu_type"),
        ({"gpu_type": "A100", "gpu_count": 0}, "gpu_type"),
    ],
)
def test_resource_settings_refuse_wrong_values(kwargs, field):
    with pytest.raises(SettingsError, match=f"ResourceSettings.{field}"):
        ResourceSettings(**kwargs)


def test_resource_settings_keep_valid_values():
    settings = ResourceSettings(cpu_count=4, gpu_count=1, gpu_type="A100", memory="16GiB")
    assert settings.to_dict() == {
        "cpu_count": 4,
        "gpu_count": 1,
        "gpu_type": "A100",
        "memory": 16 * 2**30,
    }


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"requirements": "numpy"}, "requirements"),
        ({"requirements": ["numpy", ""]}, "requirements"),
        ({"apt_packages": ["Bad Name"]}, "apt_packages"),
        ({"environment": {"1BAD": "x"}}, "environment"),
        ({"environment": {"OK": object()}}, "environment"),
        ({"build_args": ["A=1"]}, "build_args"),
        ({"parent_image": "not an image"}, "parent_image"),
        ({"dockerfile": "/nonexistent/Dockerfile"}, "dockerfile"),
        ({"dockerfile": "Dockerfile"}, "dockerfile"),  # relative: each process's own cwd
        ({"dockerfile": 3}, "dockerfile"),
        ({"build_args": {"A": "1"}}, "build_args"),  # no Dockerfile to take them
    ],
)
def test_docker_settings_refuse_wrong_values(kwargs, field):
    with pytest.raises(SettingsError, match=f"DockerSettings.{field}"):
        DockerSettings(**kwargs)


@pytest.mark.parametrize(
    "image",
    [
        "python:3.11-slim",
        "127.0.0.1:5000/stepop-base/python:3.11-bookworm",
        "nvcr.io/nvidia/pytorch:24.01-py3",
        "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu20.04",
        "python:3.11-RC1",  # a tag keeps its case
        "python@sha256:" + "a" * 64,
    ],
)
def test_docker_settings_take_the_image_references_registries_take(image):
    assert DockerSettings(parent_image=image).parent_image == image


def test_an_image_name_with_capitals_is_refused_at_parse_with_its_lowercase_spelling():
    """Registries refuse uppercase repository names; docker's build would say only
    'invalid reference format', after the task had started."""
    with pytest.raises(SettingsError) as refused:
        DockerSettings(parent_image="PyTorch/pytorch:2.4.0-RC1")
    assert "DockerSettings.parent_image='PyTorch/pytorch:2.4.0-RC1'" in str(refused.value)
    assert "lowercase: 'pytorch/pytorch:2.4.0-RC1'" in str(refused.value)


def test_docker_settings_take_a_dockerfile_as_a_path_and_keep_it_absolute(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM scratch\n")
    settings = DockerSettings(dockerfile=dockerfile, build_args={"A": "1"})
    assert settings.dockerfile == str(dockerfile) and settings.needs_build
    assert DockerSettings(dockerfile=str(dockerfile)) == DockerSettings(dockerfile=dockerfile)


def test_docker_settings_hash_follows_content_not_order_of_env():
    a = DockerSettings(
        parent_image="img:1", requirements=["numpy"], environment={"A": "1", "B": "2"}
    )
    b = DockerSettings(
        parent_image="img:1", requirements=["numpy"], environment={"B": "2", "A": "1"}
    )
    c = DockerSettings(parent_image="img:1", requirements=["numpy==2.0"], environment={"A": "1"})
    assert a.content_hash("img:1", "1") == b.content_hash("img:1", "1")
    assert a.content_hash("img:1", "1") != c.content_hash("img:1", "1")
    assert a.content_hash("img:1", "1") != a.content_hash("img:2", "1")


def test_parent_image_alone_needs_no_build():
    assert not DockerSettings(parent_image="pytorch/pytorch:2.4.0").needs_build
    assert DockerSettings(parent_image="x", apt_packages=["git"]).needs_build


def test_settings_are_checked_when_a_dag_declares_a_step():
    from airflow.sdk import dag, task

    with pytest.raises(
        SettingsError,
        match=r"@task.local_step\(task_id=.step.\).resources=\{.gpu_count.: 1\} "
        r"must be a ResourceSettings",
    ):

        @dag(schedule=None)
        def wrong():
            @task.local_step(resources={"gpu_count": 1})
            def step():
                return 1

            step()

        wrong()


@pytest.mark.parametrize(
    ("option", "value"), [("poll_interval", "soon"), ("inline_result_max_bytes", "-1")]
)
def test_a_wrong_config_value_names_the_option_and_the_fix(monkeypatch, option, value):
    from airflow_stepop import config

    monkeypatch.setenv(f"AIRFLOW__STEPOP__{option.upper()}", value)
    getter = config.get_float if option == "poll_interval" else config.get_int
    with pytest.raises(ValueError, match=rf"\[stepop\] {option}='{value}'.*must be"):
        getter(option)


@pytest.mark.parametrize("name", ["RANK", "STEPOP_CHECKPOINT_DIR"])
def test_an_image_environment_refuses_the_names_every_job_gets_from_the_runtime(name):
    """As the operators' environment= does: RANK=7 in a single-node job's image reached the
    step with no WORLD_SIZE beside it."""
    with pytest.raises(SettingsError) as err:
        DockerSettings(parent_image="python:3.11-slim", environment={name: "7"})
    message = str(err.value)
    assert f"DockerSettings.environment has {name!r}, which every job gets from the" in message
    assert f"Rename yours, e.g. 'MY_{name}'." in message


def test_an_image_may_set_pythonunbuffered_as_every_job_does_but_not_otherwise():
    """``ENV PYTHONUNBUFFERED=1`` is a common line of images; another value would be lost."""
    image = DockerSettings(parent_image="python:3.11-slim", environment={"PYTHONUNBUFFERED": "1"})
    assert image.environment == {"PYTHONUNBUFFERED": "1"}
    with pytest.raises(SettingsError) as err:
        DockerSettings(parent_image="python:3.11-slim", environment={"PYTHONUNBUFFERED": "0"})
    assert str(err.value).startswith(
        "DockerSettings.environment['PYTHONUNBUFFERED']='0': every job runs with "
        "PYTHONUNBUFFERED='1'"
    )
    assert str(err.value).endswith("Leave PYTHONUNBUFFERED out.")


def test_resource_settings_repr_is_as_written():
    """In a log line or a printed dict: the fields given, memory in its unit, not bytes."""
    assert repr(ResourceSettings(gpu_count=1, memory="16GiB")) == (
        "ResourceSettings(gpu_count=1, memory='16GiB')"
    )
