"""AzureMLStepOperator: the callable runs as an Azure ML command job (see docs/azureml.md).

The operator only declares arguments: their rules live in ``backends/azureml/config.py`` and
run at DAG parse time, so a wrong value fails the import naming the argument, the value and
what would work, and ``resources=`` is resolved to a VM size before any API call. What an unset
argument falls back to (``[stepop]`` options) is read when the task runs (``completed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_stepop.backends import arguments as check
from airflow_stepop.backends.azureml.config import AzureMLJobConfig
from airflow_stepop.links.job import StepExperimentLink, StepJobLink, StepLogsLink
from airflow_stepop.operators.base import BaseStepOperator

if TYPE_CHECKING:  # imported in make_backend(): a DAG file's parse does not need it
    from airflow_stepop.backends.azureml.backend import AzureMLBackend


class AzureMLStepOperator(BaseStepOperator):
    """Run ``python_callable`` as an Azure ML command job; results come back as references.

    :param azureml_conn_id: an ``azure_ml`` connection (workspace and credential).
    :param compute: a compute cluster's name; default serverless compute.
    :param instance_type: an Azure VM size such as ``Standard_NC6s_v3``; wins over
        ``resources=`` (default ``[stepop] azureml_default_instance_type`` when serverless).
    :param instance_count: VMs of the job (> 1: multi-node).
    :param processes_per_instance: processes per VM (PyTorch distribution; torch rank env).
    :param job_tier: ``Spot``, ``Basic``, ``Standard`` or ``Premium``; ``spot=True`` is Spot.
    :param job_priority: ``low``, ``medium`` (Azure ML's default) or ``high``: the job's place
        in its compute's queue (``queueSettings.priority``).
    :param max_runtime: ``limits.timeout``; timedelta or seconds (default the task's
        ``execution_timeout`` plus 5 minutes: the trigger cancels the job at the deadline; else
        1 day).
    :param experiment_name: the job's experiment (default the DAG id).
    :param identity: ``'user'``, ``'managed'``, ``'managed:<client id>'`` or ``'aml_token'``
        (default: the compute's own).
    :param tags: extra job tags (the dag, task and run ids are added).
    :param image_uri: a prebuilt image with python3; no build.
    :param image_repository: where built images are pushed (default
        ``[stepop] azureml_image_repository``, else the workspace's registry).
    :param shm_size: the container's /dev/shm, e.g. ``'16g'``.

    ``fallback_types`` and ``capacity_attempts`` (every operator's) apply to serverless jobs:
    a named ``compute`` cluster's VM size is fixed, so ``fallback_types`` is refused beside it.
    """

    service = "azureml"
    connection_argument = "azureml_conn_id"
    queued_capacity_arguments = ("job_priority=", "job_tier=")

    operator_extra_links = (StepJobLink(), StepExperimentLink(), StepLogsLink())
    template_fields = (*BaseStepOperator.template_fields, "image_uri")

    def __init__(
        self,
        *,
        azureml_conn_id: str = "azureml_default",
        compute: str | None = None,
        instance_type: str | None = None,
        instance_count: int = 1,
        processes_per_instance: int = 1,
        job_tier: str | None = None,
        job_priority: str | None = None,
        spot: bool = False,
        max_runtime: timedelta | int | None = None,
        experiment_name: str | None = None,
        identity: str | None = None,
        tags: Mapping[str, str] | None = None,
        image_uri: str | None = None,
        image_repository: str | None = None,
        shm_size: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check.conn_id(self.argument_owner, "azureml_conn_id", azureml_conn_id, "azureml_default")
        self.azureml = AzureMLJobConfig.from_arguments(
            self.argument_owner,
            compute=compute,
            instance_type=instance_type,
            instance_count=instance_count,
            processes_per_instance=processes_per_instance,
            job_tier=job_tier,
            job_priority=job_priority,
            spot=spot,
            max_runtime=max_runtime,
            experiment_name=experiment_name,
            identity=identity,
            tags=tags,
            image_uri=image_uri,
            image_repository=image_repository,
            shm_size=shm_size,
            resources=self.resource_settings,
            resources_as=self.resources_as,
            docker=self.docker_settings,
            artifact_root=self.artifact_root,
            fallback_types=self.fallback_types,
        )
        self.azureml_conn_id = azureml_conn_id
        self.image_uri = image_uri

    def make_backend(self) -> AzureMLBackend:
        from airflow_stepop.backends.azureml.backend import AzureMLBackend

        job = self.azureml.completed(
            self.argument_owner,
            dag_id=self.dag_id,
            execution_timeout=self.execution_timeout,
            artifact_root=self.step_artifact_root(),
            image_uri=self.image_uri,  # rendered
        )
        return AzureMLBackend(azureml_conn_id=self.azureml_conn_id, job=job)
