"""airflow-stepop: run one Airflow task's callable as a job on a managed ML service or a
Kubernetes cluster.

Public names are imported lazily, so ``python -m airflow_stepop.runtime`` and the DAG
processor's parse stay light, and the runtime package works where Airflow is not installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "ResourceSettings": "airflow_stepop.settings",
    "DockerSettings": "airflow_stepop.settings",
    "ArtifactRef": "airflow_stepop.artifacts.ref",
    "AzureMLStepOperator": "airflow_stepop.operators.azureml",
    "KubernetesStepOperator": "airflow_stepop.operators.kubernetes",
    "LocalStepOperator": "airflow_stepop.operators.local",
    "SageMakerStepOperator": "airflow_stepop.operators.sagemaker",
    "StepFailedError": "airflow_stepop.backends.outcome",
    "VertexStepOperator": "airflow_stepop.operators.vertex",
}

__all__ = [
    "ArtifactRef",
    "AzureMLStepOperator",
    "DockerSettings",
    "KubernetesStepOperator",
    "LocalStepOperator",
    "ResourceSettings",
    "SageMakerStepOperator",
    "StepFailedError",
    "VertexStepOperator",
    "get_provider_info",
]

if TYPE_CHECKING:
    from airflow_stepop.artifacts.ref import ArtifactRef
    from airflow_stepop.backends.outcome import StepFailedError
    from airflow_stepop.operators.azureml import AzureMLStepOperator
    from airflow_stepop.operators.kubernetes import KubernetesStepOperator
    from airflow_stepop.operators.local import LocalStepOperator
    from airflow_stepop.operators.sagemaker import SageMakerStepOperator
    from airflow_stepop.operators.vertex import VertexStepOperator
    from airflow_stepop.settings import DockerSettings, ResourceSettings


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'airflow_stepop' has no attribute {name!r}")


def get_provider_info() -> dict[str, Any]:
    from airflow_stepop.config import provider_config
    from airflow_stepop.hooks import azureml_form

    return {
        "package-name": "airflow-stepop",
        "name": "Step operators",
        "description": "Run one task's Python callable as a deferred job on a GPU machine of a "
        "managed ML service (or locally), with results as artifact references.",
        "versions": [__version__],
        "config": provider_config(),
        "task-decorators": [
            {
                "name": "azureml_step",
                "class-name": "airflow_stepop.decorators.azureml.azureml_step_task",
            },
            {
                "name": "kubernetes_step",
                "class-name": "airflow_stepop.decorators.kubernetes.kubernetes_step_task",
            },
            {"name": "local_step", "class-name": "airflow_stepop.decorators.local.local_step_task"},
            {
                "name": "sagemaker_step",
                "class-name": "airflow_stepop.decorators.sagemaker.sagemaker_step_task",
            },
            {
                "name": "vertex_step",
                "class-name": "airflow_stepop.decorators.vertex.vertex_step_task",
            },
        ],
        "connection-types": [
            {
                "hook-class-name": "airflow_stepop.hooks.azureml.AzureMLHook",
                "connection-type": "azure_ml",
                "conn-fields": azureml_form.CONN_FIELDS,
                "ui-field-behaviour": azureml_form.UI_FIELD_BEHAVIOUR,
            }
        ],
        "triggers": [
            {
                "integration-name": "Step operators",
                "python-modules": ["airflow_stepop.triggers.step_job"],
            }
        ],
        "filesystems": ["airflow_stepop.hooks.azureml_fs"],  # az:// as abfs://
        "extra-links": [
            "airflow_stepop.links.job.StepJobLink",
            "airflow_stepop.links.job.StepLogsLink",
            "airflow_stepop.links.job.StepExperimentLink",
        ],
    }
