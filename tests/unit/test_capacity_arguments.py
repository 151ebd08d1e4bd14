"""Capacity failover's arguments: what a step fails over to, and what is refused at parse."""

from __future__ import annotations

import pytest

from airflow_stepop import (
    DockerSettings,
    LocalStepOperator,
    ResourceSettings,
    SageMakerStepOperator,
)
from airflow_stepop.setting_values import SettingsError

ROLE = "arn:aws:iam::123456789012:role/stepop"
T4 = ResourceSettings(gpu_count=1, gpu_type="T4")
IMAGE = DockerSettings(parent_image="python:3.11-slim")


def fit(n):
    return n


def _sagemaker(**kwargs):
    return SageMakerStepOperator(task_id="fit", python_callable=fit, op_args=[1], role=ROLE,
                                 artifact_root="s3://bucket/root", docker=IMAGE,
                                 **kwargs)  # fmt: skip


def test_a_type_chosen_from_resources_fails_over_to_the_other_fitting_types_cheapest_first():
    step = _sagemaker(resources=T4)
    assert step.sagemaker.instance_type == "ml.g4dn.xlarge"
    fallbacks = step.sagemaker.fallback_types
    assert fallbacks[:2] == ("ml.g4dn.2xlarge", "ml.g4dn.4xlarge")
    assert "ml.g4dn.xlarge" not in fallbacks and all(t.startswith("ml.g4dn.") for t in fallbacks)


def test_a_named_type_fails_over_only_to_the_types_listed():
    assert _sagemaker(instance_type="ml.g5.xlarge").sagemaker.fallback_types == ()
    step = _sagemaker(instance_type="ml.g5.xlarge", fallback_types=["ml.g5.2xlarge"])
    assert step.sagemaker.fallback_types == ("ml.g5.2xlarge",)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fallback_types": "ml.g5.2xlarge"}, r"fallback_types='ml.g5.2xlarge' must be a list"),
        (
            {"fallback_types": ["g5.2xlarge"]},
            r"fallback_types\[0\]='g5.2xlarge' is not a SageMaker",
        ),
        (
            {"resources": T4, "fallback_types": ["ml.m5.large"]},
            r"fallback_types\[0\]='ml.m5.large' is .* which lacks what resources=",
        ),
        (
            {"instance_type": "ml.g5.xlarge", "fallback_types": ["ml.g5.2xlarge", "ml.g5.2xlarge"]},
            r"names 'ml.g5.2xlarge' twice",
        ),
        ({"capacity_attempts": 0}, r"capacity_attempts=0 must be a whole number from 1 to 20"),
        ({"capacity_attempts": "3"}, r"capacity_attempts='3' must be a whole number"),
    ],
)
def test_a_bad_failover_argument_fails_the_dag_import_naming_it(kwargs, message):
    with pytest.raises(SettingsError, match=message):
        _sagemaker(**kwargs)


@pytest.mark.parametrize("kwargs", [{"fallback_types": ["x"]}, {"capacity_attempts": 2}])
def test_the_local_backend_has_no_machine_types_to_fail_over_between(kwargs):
    with pytest.raises(SettingsError, match="no machine types to fail over between"):
        LocalStepOperator(task_id="t", python_callable=fit, op_args=[1], **kwargs)
