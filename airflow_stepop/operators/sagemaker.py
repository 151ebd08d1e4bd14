"""SageMakerStepOperator: the callable runs as a SageMaker training job (see docs/sagemaker.md).

Arguments beyond BaseStepOperator's are validated here, at DAG parse time: a wrong value fails
the import with a message naming the argument, the value and what would work. ``resources=`` is
resolved to the cheapest fitting instance type of the packaged catalog now, so a request nothing
fits is refused before any API call.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow_stepop import config
from airflow_stepop.backends.base import JobRequest
from airflow_stepop.backends.sagemaker import (
    SageMakerBackend,
    SageMakerJobConfig,
    estimate_cost,
    with_labels,
)
from airflow_stepop.catalog import load as load_catalog
from airflow_stepop.links.job import StepJobLink, StepLogsLink
from airflow_stepop.operators.base import BaseStepOperator
from airflow_stepop.settings import SettingsError

MAX_RUNTIME_LIMIT = 28 * 24 * 3600  # SageMaker's MaxRuntimeInSeconds ceiling (28 days)
KEEP_ALIVE_LIMIT = 3600
BILLING_XCOM_KEY = "sagemaker_billing"
_INSTANCE_TYPE = re.compile(r"^ml\.[a-z0-9-]+\.[a-z0-9]+$")
_ROLE = re.compile(r"^(arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,64}|[\w+=,.@-]{1,64})$")
_SUBNET = re.compile(r"^subnet-[0-9a-f]{8,17}$")
_SECURITY_GROUP = re.compile(r"^sg-[0-9a-f]{8,17}$")
_KMS = re.compile(r"^[A-Za-z0-9:/_\-]{1,2048}$")
_TAG_KEY = re.compile(r"^[\w.:/=+\-@ ]{1,128}$", re.UNICODE)
_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d")
_CONN_ID = re.compile(r"^[\w.\-]+$")


def _seconds(name: str, value: Any, *, low: int, high: int) -> int:
    if isinstance(value, timedelta):
        seconds = math.ceil(value.total_seconds())
    elif isinstance(value, int) and not isinstance(value, bool):
        seconds = value
    else:
        raise SettingsError(
            f"SageMakerStepOperator.{name}={value!r} must be a timedelta or whole seconds, "
            f"e.g. timedelta(hours=2) or 7200."
        )
    if not low <= seconds <= high:
        raise SettingsError(
            f"SageMakerStepOperator.{name}={value!r} is {seconds} s; SageMaker takes "
            f"{low}..{high} s."
        )
    return seconds


def _ids(name: str, value: Any, pattern: re.Pattern[str], example: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise SettingsError(
            f"SageMakerStepOperator.{name}={value!r} must be a list of ids, e.g. [{example!r}]."
        )
    for item in value:
        if not isinstance(item, str) or not pattern.match(item):
            raise SettingsError(
                f"SageMakerStepOperator.{name} has {item!r}, which is not an id like {example!r}."
            )
    if len(value) > 16:
        raise SettingsError(
            f"SageMakerStepOperator.{name} has {len(value)} ids; SageMaker takes at most 16."
        )
    return tuple(value)


class SageMakerStepOperator(BaseStepOperator):
    """Run ``python_callable`` as a SageMaker training job; results come back as references.

    :param role: execution role ARN or name (default ``[stepop] sagemaker_role``).
    :param aws_conn_id: the amazon provider's AWS connection (region, credentials, role
        assumption and endpoint overrides come from it).
    :param region_name: overrides the connection's region.
    :param instance_type: an explicit ``ml.*`` type; wins over ``resources=``.
    :param instance_count: machines of the job (> 1: multi-node, torch-style rank env).
    :param volume_size_gb: EBS volume per machine.
    :param max_runtime: timedelta or seconds; default the task's ``execution_timeout``, else 1 day.
    :param spot: managed spot training, with checkpoints in ``$STEPOP_CHECKPOINT_DIR``.
    :param max_wait: spot only: runtime plus waiting for capacity (default 2 x max_runtime).
    :param keep_alive: warm pool keep-alive (timedelta or seconds, at most 1 hour).
    :param subnets: VPC subnet ids; ``security_group_ids`` must come with them.
    :param volume_kms_key: KMS key of the machines' volumes.
    :param output_kms_key: KMS key of the uploaded outputs.
    :param tags: extra job tags (the dag, task and run ids are added).
    :param image_uri: a prebuilt image with python3; no build.
    :param image_repository: where built images are pushed (default
        ``[stepop] sagemaker_image_repository``, else ECR of the connection's account).
    """

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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        owner = "SageMakerStepOperator"
        templated = isinstance(role, str) and "{{" in role
        if role is not None and not templated and not (isinstance(role, str) and _ROLE.match(role)):
            raise SettingsError(
                f"{owner}.role={role!r} is not an IAM role; give its ARN "
                "('arn:aws:iam::123456789012:role/SageMakerExecution') or its name."
            )
        if aws_conn_id is not None and (
            not isinstance(aws_conn_id, str) or not _CONN_ID.match(aws_conn_id)
        ):
            raise SettingsError(
                f"{owner}.aws_conn_id={aws_conn_id!r} must be an Airflow connection id such "
                "as 'aws_default'."
            )
        if region_name is not None and (
            not isinstance(region_name, str) or not _REGION.fullmatch(region_name)
        ):
            raise SettingsError(
                f"{owner}.region_name={region_name!r} is not an AWS region such as 'us-east-1'."
            )
        catalog = load_catalog("sagemaker_training")
        if instance_type is not None:
            if not isinstance(instance_type, str) or not _INSTANCE_TYPE.match(instance_type):
                near = ", ".join(m.name for m in catalog.types[:4])
                raise SettingsError(
                    f"{owner}.instance_type={instance_type!r} is not a SageMaker instance type; "
                    f"use e.g. {near}."
                )
        elif self.resource_settings is not None:
            instance_type = catalog.resolve(self.resource_settings, owner=f"{owner}.resources").name
        if (
            isinstance(instance_count, bool)
            or not isinstance(instance_count, int)
            or not (1 <= instance_count <= 100)
        ):
            raise SettingsError(
                f"{owner}.instance_count={instance_count!r} must be a whole number from 1 to 100."
            )
        if (
            isinstance(volume_size_gb, bool)
            or not isinstance(volume_size_gb, int)
            or not (1 <= volume_size_gb <= 16384)
        ):
            raise SettingsError(
                f"{owner}.volume_size_gb={volume_size_gb!r} must be whole GB from 1 to 16384."
            )
        max_runtime_s = (
            None
            if max_runtime is None
            else _seconds("max_runtime", max_runtime, low=1, high=MAX_RUNTIME_LIMIT)
        )
        if not isinstance(spot, bool):
            raise SettingsError(f"{owner}.spot={spot!r} must be True or False.")
        max_wait_s = None
        if max_wait is not None:
            if not spot:
                raise SettingsError(
                    f"{owner}.max_wait={max_wait!r} applies to spot jobs only; set spot=True or "
                    "drop max_wait."
                )
            max_wait_s = _seconds("max_wait", max_wait, low=1, high=2 * MAX_RUNTIME_LIMIT)
            if max_runtime_s is not None and max_wait_s < max_runtime_s:
                raise SettingsError(
                    f"{owner}.max_wait={max_wait!r} is shorter than max_runtime="
                    f"{max_runtime!r}; SageMaker needs max_wait >= max_runtime."
                )
        keep_alive_s = (
            None
            if keep_alive is None
            else _seconds("keep_alive", keep_alive, low=0, high=KEEP_ALIVE_LIMIT)
        )
        subnet_ids = _ids("subnets", subnets, _SUBNET, "subnet-0123456789abcdef0")
        group_ids = _ids("security_group_ids", security_group_ids, _SECURITY_GROUP, "sg-0123abcd")
        if bool(subnet_ids) != bool(group_ids):
            raise SettingsError(
                f"{owner}: subnets={subnets!r} and security_group_ids={security_group_ids!r} go "
                "together (SageMaker's VpcConfig needs both); set both or neither."
            )
        for name, key in (("volume_kms_key", volume_kms_key), ("output_kms_key", output_kms_key)):
            if key is not None and (not isinstance(key, str) or not _KMS.match(key)):
                raise SettingsError(
                    f"{owner}.{name}={key!r} is not a KMS key id, alias or ARN (e.g. "
                    "'arn:aws:kms:us-east-1:123456789012:key/1234abcd-...' or 'alias/my-key')."
                )
        tag_map: dict[str, str] = {}
        if tags is not None:
            if not isinstance(tags, Mapping):
                raise SettingsError(f"{owner}.tags={tags!r} must be a dict of str -> str.")
            for key, value in tags.items():
                if not isinstance(key, str) or not _TAG_KEY.match(key) or key.startswith("aws:"):
                    raise SettingsError(
                        f"{owner}.tags has the key {key!r}; keys are 1-128 letters, digits, "
                        "spaces or _.:/=+-@ and may not start with 'aws:'."
                    )
                if not isinstance(value, str) or len(value) > 256:
                    raise SettingsError(
                        f"{owner}.tags[{key!r}]={value!r} must be a string of at most 256 chars."
                    )
                tag_map[key] = value
        if image_uri is not None and not (
            isinstance(image_uri, str)
            and ("{{" in image_uri or re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/:@\-]*", image_uri))
        ):
            raise SettingsError(
                f"{owner}.image_uri={image_uri!r} is not an image reference; use e.g. "
                "'123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1.0'."
            )
        if image_uri is None and self.docker_settings is None:
            raise SettingsError(
                f"{owner} needs an image: set image_uri= (a prebuilt image with python3) or "
                "docker=DockerSettings(parent_image=..., requirements=[...])."
            )
        if image_repository is not None:
            from airflow_stepop.images.registry import check_repository

            try:
                check_repository(image_repository, f"{owner}.image_repository")
            except ValueError as exc:
                raise SettingsError(str(exc)) from exc
        if self.artifact_root is not None and not self.artifact_root.startswith("s3://"):
            raise SettingsError(
                f"{owner}.artifact_root={self.artifact_root!r} must be an s3:// URL such as "
                "'s3://my-bucket/stepop' (SageMaker reads inputs and writes results in S3)."
            )
        self.role = role
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.instance_type = instance_type
        self.instance_count = instance_count
        self.volume_size_gb = volume_size_gb
        self.max_runtime_s = max_runtime_s
        self.spot = spot
        self.max_wait_s = max_wait_s
        self.keep_alive_s = keep_alive_s
        self.subnets = subnet_ids
        self.security_group_ids = group_ids
        self.volume_kms_key = volume_kms_key
        self.output_kms_key = output_kms_key
        self.tags = tag_map
        self.image_uri = image_uri
        self.image_repository = image_repository

    @property
    def storage_conn_id(self) -> str | None:
        return self.aws_conn_id

    def _job_config(self) -> SageMakerJobConfig:
        owner = "SageMakerStepOperator"
        role = self.role or config.get("sagemaker_role")
        if not role:
            raise SettingsError(
                f"{owner}.role is not set and [stepop] sagemaker_role is empty: give the "
                "SageMaker execution role's ARN or name (see docs/sagemaker.md, IAM)."
            )
        root = self.artifact_root or config.artifact_root()
        if not root.startswith("s3://"):
            raise SettingsError(
                f"{owner} needs an s3:// artifact root, but it is {root!r}: set artifact_root= "
                "or [stepop] artifact_root to e.g. 's3://my-bucket/stepop'."
            )
        instance_type = self.instance_type or config.get("sagemaker_default_instance_type")
        max_runtime = self.max_runtime_s
        if max_runtime is None:
            if isinstance(self.execution_timeout, timedelta):
                max_runtime = min(
                    MAX_RUNTIME_LIMIT, max(1, math.ceil(self.execution_timeout.total_seconds()))
                )
            else:
                max_runtime = 86400
        max_wait = self.max_wait_s
        if self.spot and max_wait is None:
            max_wait = min(2 * max_runtime, 2 * MAX_RUNTIME_LIMIT)
        if self.spot and max_wait is not None and max_wait < max_runtime:
            raise SettingsError(
                f"{owner}.max_wait={max_wait} s is shorter than max_runtime={max_runtime} s; "
                "SageMaker needs max_wait >= max_runtime."
            )
        machine = load_catalog("sagemaker_training").get(instance_type)
        return SageMakerJobConfig(
            role=role,
            instance_type=instance_type,
            instance_count=self.instance_count,
            volume_size_gb=self.volume_size_gb,
            max_runtime_s=max_runtime,
            spot=self.spot,
            max_wait_s=max_wait,
            keep_alive_s=self.keep_alive_s,
            subnets=self.subnets,
            security_group_ids=self.security_group_ids,
            volume_kms_key=self.volume_kms_key,
            output_kms_key=self.output_kms_key,
            tags=dict(self.tags),
            image_uri=self.image_uri,
            image_repository=self.image_repository
            or config.get("sagemaker_image_repository")
            or None,
            price_per_hour=machine.price_per_hour if machine else None,
        )

    def make_backend(self) -> SageMakerBackend:
        return SageMakerBackend(
            aws_conn_id=self.aws_conn_id, region_name=self.region_name, job=self._job_config()
        )

    def _prepare(self, context: Any, key: str) -> JobRequest:
        ti = context["ti"]
        request = super()._prepare(context, key)
        return with_labels(request, run_id=ti.run_id, map_index=ti.map_index)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        result = super().execute_complete(context, event)
        self._report_billing(context, event)
        return result

    def _report_billing(self, context: Any, event: dict[str, Any]) -> None:
        """Billable seconds and estimated cost: in the task log and XCom 'sagemaker_billing'."""
        handle, description = event["handle"], event.get("details") or {}
        if not description.get("BillableTimeInSeconds"):
            self.log.warning("Job %s reported no billable time", handle["job_id"])
            return
        instance_type = description.get("ResourceConfig", {}).get("InstanceType", "")
        machine = load_catalog("sagemaker_training").get(instance_type)
        billing = estimate_cost(description, machine.price_per_hour if machine else None)
        billing["catalog_date"] = load_catalog("sagemaker_training").date
        cost = billing["estimated_cost_usd"]
        self.log.info(
            "Job %s: %d billable s x %d x %s%s", handle["job_id"], billing["billable_seconds"],
            billing["instance_count"], instance_type,
            f" = about ${cost:.4f} on demand (catalog {billing['catalog_date']})"
            if cost is not None else " (no price in the catalog)",
        )  # fmt: skip
        context["ti"].xcom_push(key=BILLING_XCOM_KEY, value=billing)
