"""The packaged SageMaker catalog and the generic resolver ResourceSettings -> instance type."""

from __future__ import annotations

import botocore.session
import pytest

from airflow_stepop.catalog import NoFittingMachineError, load
from airflow_stepop.catalog.resolver import parse
from airflow_stepop.settings import ResourceSettings


@pytest.fixture(scope="module")
def catalog():
    return load("airflow_stepop.backends.sagemaker")


def test_the_catalog_has_its_date_region_and_only_real_training_types(catalog):
    assert catalog.date == "2026-11-22" and catalog.region == "us-east-1"
    model = botocore.session.get_session().get_service_model("sagemaker")
    valid = set(model.shape_for("TrainingInstanceType").enum)
    assert {m.name for m in catalog.types} <= valid
    assert all(m.price_per_hour and m.price_per_hour > 0 for m in catalog.types)
    assert all(bool(m.gpu_model) == (m.gpu_count > 0) for m in catalog.types)


@pytest.mark.parametrize(
    ("want", "expected"),
    [
        (ResourceSettings(gpu_count=1, memory="16GiB"), "ml.g4dn.xlarge"),
        (ResourceSettings(gpu_count=1, memory="17GiB"), "ml.g4dn.2xlarge"),
        (ResourceSettings(gpu_type="A10G"), "ml.g5.xlarge"),
        (ResourceSettings(gpu_type="nvidia-l4", gpu_count=4), "ml.g6.12xlarge"),
        (ResourceSettings(gpu_type="A100"), "ml.p4d.24xlarge"),
        (ResourceSettings(gpu_type="H100", gpu_count=8), "ml.p5.48xlarge"),
        (ResourceSettings(cpu_count=2, memory="4GiB"), "ml.t3.medium"),
        (ResourceSettings(cpu_count=16, memory="100GiB", gpu_count=0), "ml.r5.4xlarge"),
        (ResourceSettings(cpu_count=64), "ml.c6i.16xlarge"),
    ],
)
def test_the_cheapest_fitting_type_wins(catalog, want, expected):
    assert catalog.resolve(want).name == expected


def test_the_choice_is_the_cheapest_of_all_that_fit(catalog):
    want = ResourceSettings(gpu_count=1, memory="16GiB")
    chosen = catalog.resolve(want)
    assert chosen.price_per_hour == min(m.price_per_hour for m in catalog.types if m.fits(want))


def test_a_request_nothing_fits_is_refused_with_the_closest_types(catalog):
    with pytest.raises(NoFittingMachineError) as err:
        catalog.resolve(ResourceSettings(gpu_count=16, gpu_type="H100"), owner="resources")
    message = str(err.value)
    assert "resources=ResourceSettings(gpu_count=16, gpu_type='H100')" in message
    assert "catalog date 2026-11-22" in message
    assert "Closest: ml.p5.48xlarge (192 vCPU, 2048 GiB, 8 x H100 80 GiB" in message
    assert "instance_count" in message and "instance_type=" in message


def test_an_unknown_gpu_model_is_refused_with_the_models_there_are(catalog):
    with pytest.raises(NoFittingMachineError, match="gpu_type='B9000'") as err:
        catalog.resolve(ResourceSettings(gpu_type="B9000"))
    message = str(err.value)
    assert "has a 'B9000' GPU" in message and "T4" in message and "A100" in message
    assert "Closest" not in message  # no list of machines that have none of it


def test_a_known_gpu_model_in_other_spellings_is_not_unknown(catalog):
    for spelling in ("nvidia-t4", "NVIDIA_TESLA_T4", "t4"):
        assert catalog.resolve(ResourceSettings(gpu_type=spelling)).gpu_model


def test_another_service_reuses_the_resolver_with_its_own_file():
    text = (
        "# service: Example cloud\n# catalog_date: 2026-01-01\n# region: r1\n"
        "instance_type,vcpu,memory_gib,gpu_count,gpu_model,gpu_memory_gib,price_per_hour\n"
        "big,8,64,1,T4,16,2.0\nsmall,2,8,0,,0,0.1\n"
    )
    other = parse(text, "example")
    assert other.service == "Example cloud" and other.get("small").vcpu == 2
    assert other.resolve(ResourceSettings(gpu_count=1)).name == "big"
    assert other.resolve(ResourceSettings()).name == "small"


def test_spot_is_priced_at_the_spot_rate_where_known_else_on_demand_at_most(catalog):
    """One rule for every service's progress lines and billing: SageMaker's catalog has no
    Spot prices (managed Spot varies), so a Spot job is shown at the on-demand price."""
    machine = catalog.get("ml.g5.xlarge")
    assert machine.spot_price_per_hour is None
    assert machine.hourly_price(spot=True) == machine.hourly_price() == machine.price_per_hour
    vertex = load("airflow_stepop.backends.vertex").get("n1-standard-4")
    assert vertex.hourly_price(spot=True) == vertex.spot_price_per_hour < vertex.price_per_hour
