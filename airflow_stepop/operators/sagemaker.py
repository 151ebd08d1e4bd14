"""SageMakerStepOperator: the callable runs as a SageMaker training job (see docs/sagemaker.md).

The operator only declares arguments: their rules live in ``backends/sagemaker/config.py``
and run at DAG parse time, so a wrong value fails the import naming the argument, the value and
what would work, and ``resources=`` is resolved to an instance type before any API call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_stepop.backends.sagemaker.config import SageMakerArguments, SageMakerJobConfig
from airflow_stepop.links.job import StepJobLink, StepLogsLink
from airflow_stepop.operators.base import BaseStepOperator

if TYPE_CHECKING:  # imported in make_backend(): a DAG file's parse does not need it
    from airflow_stepop.backends.sagemaker.backend import SageMakerBackend


class SageMakerStepOperator(BaseStepOperator):
    """Run ``python_callable`` as a SageMaker training job; results come back as references.

    :param role: execution role ARN or name (default ``[stepop] sagemaker_role``).
    :param aws_conn_id: the amazon provider's AWS connection (region, credentials, role
        assumption and endpoint overrides come from it).
    :param region_name: overrides the connection's region.
    :param instance_type: an explicit ``ml.*`` type; wins over ``resources=``.
    :param instance_count: machines of the job (> 1: multi-node, torch-style rank env).
    :param volume_size_gb: EBS volume per machine.
    :param max_runtime: timedelta or seconds; default the task's ``execution_timeout`` plus 5
        minutes (the trigger stops the job at the deadline; this limit only ends one nobody
        watches), else 1 day.
    :param spot: managed spot training (resumes from ``$STEPOP_CHECKPOINT_DIR``, as any job can).
    :param max_wait: spot only: runtime plus waiting for capacity (default 2 x max_runtime).
    :param keep_alive: warm pool keep-alive (timedelta or seconds, at most 1 hour).
    :param subnets: VPC subnet ids; ``security_group_ids`` must come with them.
    :param volume_kms_key: KMS key of the machines' volumes.
    :param output_kms_key: KMS key of the uploaded outputs.
    :param tags: extra job tags, at most 46; keys starting with ``airflow-`` are reserved (the
        dag, task and run ids and the map index are added).
    :param image_uri: a prebuilt image with python3 in ECR (or on the image repository's
        registry); no build.
    :param training_plan_arn: a SageMaker training plan's ARN: the job runs on its reserved
        instances (``instance_type=`` the plan's type), waiting Pending until they are there.
    :param image_repository: where built images are pushed (default
        ``[stepop] sagemaker_image_repository``, else ECR of the connection's account).
    """

    service = "sagemaker"
    connection_argument = "aws_conn_id"
    queued_capacity_arguments = ("training_plan_arn=",)
    ambient_default = "aws_default"  # missing: boto3's credential chain, as in Airflow

    operator_extra_links = (StepJobLink(), StepLogsLink())
    template_fields = (*BaseStepOperator.template_fields, "role", "image_uri")

    def __init__(
        self,
        *,
        role: str | None = None,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        instance_type: str | None = None,
        instance_count: int = 1,
        volume_size_gb: int = 30,
        max_runtime: timedelta | int | None = None,
        spot: bool = False,
        max_wait: timedelta | int | None = None,
        keep_alive: timedelta | int | None = None,
        subnets: Sequence[str] | None = None,
        security_group_ids: Sequence[str] | None = None,
        volume_kms_key: str | None = None,
        output_kms_key: str | None = None,
        tags: Mapping[str, str] | None = None,
        image_uri: str | None = None,
        image_repository: str | None = None,
        training_plan_arn: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.sagemaker = SageMakerArguments.check(
            self.argument_owner,
            resources=self.resource_settings,
            resources_as=self.resources_as,
            docker=self.docker_settings,
            artifact_root=self.artifact_root,
            role=role,
            aws_conn_id=aws_conn_id,
            region_name=region_name,
            instance_type=instance_type,
            instance_count=instance_count,
            volume_size_gb=volume_size_gb,
            max_runtime=max_runtime,
            spot=spot,
            max_wait=max_wait,
            keep_alive=keep_alive,
            subnets=subnets,
            security_group_ids=security_group_ids,
            volume_kms_key=volume_kms_key,
            output_kms_key=output_kms_key,
            tags=tags,
            image_uri=image_uri,
            image_repository=image_repository,
            fallback_types=self.fallback_types,
            training_plan_arn=training_plan_arn,
        )
        self.role = role
        self.image_uri = image_uri
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name

    @property
    def storage_conn_id(self) -> str | None:
        return self.aws_conn_id

    def _job_config(self) -> SageMakerJobConfig:
        return self.sagemaker.job_config(
            self.argument_owner,
            role=self.role,
            image_uri=self.image_uri,
            artifact_root=self.step_artifact_root(),
            execution_timeout=self.execution_timeout,
        )

    def make_backend(self) -> SageMakerBackend:
        from airflow_stepop.backends.sagemaker.backend import SageMakerBackend

        return SageMakerBackend(
            aws_conn_id=self.aws_conn_id, region_name=self.region_name, job=self._job_config()
        )
