"""The Vertex catalog answers to Vertex's own accelerator names, every one of them."""

from __future__ import annotations

import pytest

from airflow_stepop.backends.vertex.machines import ACCELERATORS, CATALOG, split_machine
from airflow_stepop.catalog import NoFittingMachineError, load
from airflow_stepop.settings import ResourceSettings

CATALOG_ROWS = load(CATALOG).types
LISTED = {split_machine(m.name)[1] for m in CATALOG_ROWS} - {None}


@pytest.mark.parametrize("accelerator", sorted(LISTED))
def test_a_listed_accelerator_by_its_vertex_name_resolves_to_its_machines(accelerator):
    chosen = load(CATALOG).resolve(ResourceSettings(gpu_type=accelerator))
    assert split_machine(chosen.name)[1] == accelerator, chosen.name


@pytest.mark.parametrize("accelerator", sorted(set(ACCELERATORS) - LISTED))
def test_an_accelerator_the_catalog_lacks_is_refused_by_its_name(accelerator):
    with pytest.raises(NoFittingMachineError) as err:
        load(CATALOG).resolve(ResourceSettings(gpu_type=accelerator))
    assert f"has a {accelerator!r} GPU" in str(err.value)


@pytest.mark.parametrize(
    ("asked", "accelerator"),
    [
        ("NVIDIA_H100_80GB", "NVIDIA_H100_80GB"),
        ("nvidia-h100", "NVIDIA_H100_80GB"),
        ("H100", "NVIDIA_H100_80GB"),
        ("NVIDIA_A100_80GB", "NVIDIA_A100_80GB"),
        ("a100-80gb", "NVIDIA_A100_80GB"),
        ("NVIDIA_TESLA_A100", "NVIDIA_TESLA_A100"),
        ("A100", "NVIDIA_TESLA_A100"),  # the 40 GB one, not the 80 GB
        ("l4", "NVIDIA_L4"),
    ],
)
def test_short_and_vertex_names_pick_the_same_model(asked, accelerator):
    chosen = load(CATALOG).resolve(ResourceSettings(gpu_type=asked))
    assert split_machine(chosen.name)[1] == accelerator, chosen.name


def test_the_h100_mega_is_not_taken_for_the_plain_h100():
    # a3-megagpu-8g is no catalog type: asking for its GPU must not land on a3-highgpu
    with pytest.raises(NoFittingMachineError, match="NVIDIA_H100_MEGA_80GB"):
        load(CATALOG).resolve(ResourceSettings(gpu_type="NVIDIA_H100_MEGA_80GB"))
