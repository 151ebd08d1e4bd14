"""Azure ML arguments: parse-time checks, defaults, the VM size catalog and its prices."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_stepop.backends.azureml.config import (
    AzureMLJobConfig,
    experiment_for,
    hourly_price,
    job_price_per_hour,
)
from airflow_stepop.catalog import NoFittingMachineError
from airflow_stepop.catalog import load as load_catalog
from airflow_stepop.settings import DockerSettings, ResourceSettings, SettingsError

OWNER = "AzureMLStepOperator"
IMAGE = "myregistry.azurecr.io/train:1.0"


def config(**kwargs):
    return AzureMLJobConfig.from_arguments(OWNER, **{"image_uri": IMAGE, **kwargs})


def test_resources_pick_the_cheapest_fitting_vm_size():
    assert config(resources=ResourceSettings(cpu_count=2, memory="4GiB")).instance_type == (
        "Standard_F2s_v2"
    )
    gpu = config(resources=ResourceSettings(gpu_count=1, gpu_type="A100"))
    assert gpu.instance_type == "Standard_NC24ads_A100_v4"
    assert config(resources=ResourceSettings(gpu_count=1)).instance_type == "Standard_NC4as_T4_v3"


def test_an_explicit_instance_type_wins_and_is_spelled_as_azure_does():
    job = config(instance_type="standard_nc6s_v3", resources=ResourceSettings(cpu_count=2))
    assert job.instance_type == "Standard_NC6s_v3"


def test_with_a_named_cluster_resources_are_checked_at_submit_not_resolved_now():
    job = config(compute="gpu-cluster", resources=ResourceSettings(gpu_count=1))
    assert job.instance_type is None and job.resources == ResourceSettings(gpu_count=1)


def test_nothing_fits_names_the_three_closest_sizes():
    with pytest.raises(NoFittingMachineError) as err:
        config(resources=ResourceSettings(gpu_count=16, gpu_type="H100"))
    message = str(err.value)
    assert message.startswith(f"{OWNER}.resources=ResourceSettings(")
    assert message.count("Standard_") == 3


def test_spot_is_the_short_form_of_the_spot_tier():
    assert config(spot=True).job_tier == "Spot"
    assert config(job_tier="Spot", spot=True).spot
    assert config(job_tier="Premium").job_tier == "Premium"


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"identity": "managed:not-a-guid"}, "'managed:<client id>'"),
        ({"job_tier": "Premium", "compute": "cpu-cluster"}, "a setting of serverless jobs"),
        ({"max_runtime": timedelta(days=31)}, "Azure ML takes 1..2592000 s"),
        ({"image_repository": "no-slash"}, "image_repository='no-slash'"),
        ({"image_uri": "bad image"}, "image_uri='bad image'"),
        ({"artifact_root": "gs://b/x"}, "abfs://mycontainer/stepop"),
        ({"tags": {"airflow_dag_id": "mine"}}, "'airflow_dag_id', which is ours"),
        ({"tags": {"Stepop_Task": "x"}}, "Rename it, e.g. 'my_Stepop_Task'"),
        ({"tags": {f"k{i}": "v" for i in range(46)}}, "at most 45 are allowed (Azure takes 50"),
    ],
)
def test_refusals_name_the_value_and_a_valid_example(arguments, says):
    with pytest.raises(SettingsError) as err:
        config(**arguments)
    assert says in str(err.value)


def test_an_image_comes_from_image_uri_or_docker_settings():
    job = AzureMLJobConfig.from_arguments(OWNER, docker=DockerSettings(parent_image="python:3.11"))
    assert job.image_uri is None
    with pytest.raises(SettingsError, match="needs an image"):
        AzureMLJobConfig.from_arguments(OWNER)


def test_identities_become_the_rest_shape():
    assert config(identity="user").identity == {"identityType": "UserIdentity"}
    assert config(identity="managed").identity == {"identityType": "Managed"}
    guid = "12345678-1234-1234-1234-123456789012"
    assert config(identity=f"managed:{guid}").identity == {
        "identityType": "Managed",
        "clientId": guid,
    }
    assert config().identity is None


def completed(job, dag_id="d", execution_timeout=None):
    return job.completed(
        OWNER,
        dag_id=dag_id,
        execution_timeout=execution_timeout,
        artifact_root="abfs://container/stepop",
        image_uri=IMAGE,
    )


def test_defaults_at_execute_time_come_from_the_task():
    job = completed(config(), "nightly.train-v2", timedelta(minutes=90))
    # 5 minutes past the deadline: the trigger cancels the job first (AirflowTaskTimeout), and
    # limits.timeout only ends a job nobody watches
    assert job.max_runtime_s == 5700
    assert job.experiment_name == "nightly_train-v2"
    assert job.instance_type == "Standard_DS3_v2"
    kept = completed(config(max_runtime=60, experiment_name="exp"))
    assert (kept.max_runtime_s, kept.experiment_name) == (60, "exp")
    own = completed(config(max_runtime=60), execution_timeout=timedelta(minutes=90))
    assert own.max_runtime_s == 60  # the user's own limit, as given
    longest = completed(config(), execution_timeout=timedelta(days=30))
    assert longest.max_runtime_s == 30 * 24 * 3600  # Azure ML's maximum
    assert completed(config()).max_runtime_s == 24 * 3600
    on_cluster = completed(config(compute="cpu-cluster"))
    assert on_cluster.instance_type is None  # the cluster's own size


def test_experiment_names_from_dag_ids_are_valid():
    assert experiment_for("a.b c") == "a_b_c"
    assert experiment_for("__x") == "x"


def test_an_experiment_name_the_service_refuses_is_named_with_its_rule():
    with pytest.raises(SettingsError) as err:
        config(experiment_name="my exp!")
    assert "experiment_name='my exp!' is not an experiment name (up to 255 letters, digits, " in (
        str(err.value)
    )


def test_the_job_price_counts_every_instance_and_uses_the_low_priority_rate_for_spot():
    dedicated, low = hourly_price("Standard_NC6s_v3", False), hourly_price("Standard_NC6s_v3", True)
    assert low is not None and dedicated is not None and 0 < low < dedicated
    assert job_price_per_hour("Standard_NC6s_v3", 2, False) == pytest.approx(2 * dedicated)
    assert job_price_per_hour("Standard_NC6s_v3", 1, True) == low
    assert job_price_per_hour("Standard_Unlisted_v9", 1, False) is None


def test_every_catalog_size_is_one_azure_ml_accepts_and_is_priced():
    from cloud.azureml.catalog import INSTANCE_TYPES, canonical_instance_type

    catalog = load_catalog("airflow_stepop.backends.azureml")
    assert catalog.date != "unknown" and catalog.region == "eastus"
    for machine in catalog.types:
        assert canonical_instance_type(machine.name) == machine.name
        assert machine.price_per_hour and machine.spot_price_per_hour
        gpu_model, gpu_count = INSTANCE_TYPES[machine.name]
        model = gpu_model.split("_")[0]  # the fake says A100_80GB; the catalog has its memory
        assert (machine.gpu_model or "", machine.gpu_count) == (model, gpu_count)
