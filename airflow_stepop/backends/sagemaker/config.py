"""SageMaker's argument rules: an operator's keyword arguments -> a training job configuration.

``SageMakerArguments.check`` runs at DAG parse time (a wrong value fails the import, naming
the argument, the value and a valid example; ``resources=`` is resolved to the cheapest fitting
instance type now). ``job_config`` adds what is only known at run time (the default role and
instance type from ``[stepop]``, ``max_runtime`` from ``execution_timeout`` plus a grace (see
``arguments.runtime_limit``), rendered templates).
"""

from __future__ import annotations

import functools
import re
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_stepop.backends import arguments as check
from airflow_stepop.backends.sagemaker.image import IMAGE_EXAMPLE, check_image_uri
from airflow_stepop.setting_values import SettingsError

if TYPE_CHECKING:  # annotations only: a DAG without settings never builds one
    from airflow_stepop.catalog.resolver import Catalog
    from airflow_stepop.settings import DockerSettings, ResourceSettings

CATALOG = "airflow_stepop.backends.sagemaker"
MAX_RUNTIME_LIMIT = 28 * 24 * 3600  # SageMaker's MaxRuntimeInSeconds ceiling (28 days)
DEFAULT_RUNTIME = 24 * 3600  # without max_runtime and execution_timeout
KEEP_ALIVE_LIMIT = 3600
SERVICE = "SageMaker"
_INSTANCE_TYPE = r"ml\.[a-z0-9-]+\.[a-z0-9]+"
_ROLE = r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,64}|[\w+=,.@-]{1,64}"
_SUBNET = r"^subnet-[0-9a-f]{8,17}$"
_SECURITY_GROUP = r"^sg-[0-9a-f]{8,17}$"
_KMS = r"[A-Za-z0-9:/_\-]{1,2048}"
# SageMaker's tag alphabet (letters, digits, spaces, _.:/=+-@); 'aws:' is AWS's, in any case.
_TAG_KEY = r"(?![Aa][Ww][Ss]:)[\w.:/=+\-@ ]{1,128}"
_TAG_VALUE = r"[\w.:/=+\-@ ]{0,256}"
_REGION = r"[a-z]{2}(-[a-z]+)+-\d"
# botocore's TrainingPlanArn pattern, and a name for the error's example
_TRAINING_PLAN = r"arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:[0-9]{12}:training-plan/.{1,1983}"
TRAINING_PLAN_EXAMPLE = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p5-week"
TAG_LIMIT = 50  # SageMaker's tags per training job
# The tags every job gets (from the task instance's labels): user tags may not replace them.
OWN_TAG_PREFIX = "airflow-"
OWN_TAGS = ("airflow-dag-id", "airflow-task-id", "airflow-run-id", "airflow-map-index")
USER_TAG_LIMIT = TAG_LIMIT - len(OWN_TAGS)


@dataclass(frozen=True)
class SageMakerJobConfig:
    """The training job's settings, complete: what the backend turns into a request."""

    role: str
    instance_type: str
    instance_count: int = 1
    volume_size_gb: int = 30
    max_runtime_s: int = DEFAULT_RUNTIME
    spot: bool = False
    max_wait_s: int | None = None
    keep_alive_s: int | None = None
    subnets: tuple[str, ...] = ()
    security_group_ids: tuple[str, ...] = ()
    volume_kms_key: str | None = None
    output_kms_key: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    image_uri: str | None = None
    image_repository: str | None = None
    # the instance types to fail over to, in order, when SageMaker has no capacity for one
    fallback_types: tuple[str, ...] = ()
    # capacity reserved ahead (a SageMaker training plan): the job waits for it, Pending
    training_plan_arn: str | None = None


@dataclass(frozen=True)
class SageMakerArguments:
    """An operator's SageMaker arguments, checked; None where a run-time default applies."""

    instance_type: str | None = None
    instance_count: int = 1
    volume_size_gb: int = 30
    max_runtime_s: int | None = None
    spot: bool = False
    max_wait_s: int | None = None
    keep_alive_s: int | None = None
    subnets: tuple[str, ...] = ()
    security_group_ids: tuple[str, ...] = ()
    volume_kms_key: str | None = None
    output_kms_key: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    image_repository: str | None = None
    fallback_types: tuple[str, ...] = ()
    training_plan_arn: str | None = None

    @classmethod
    def check(
        cls,
        owner: str,
        *,
        resources: ResourceSettings | None,
        docker: DockerSettings | None,
        artifact_root: str | None,
        role: Any = None,
        aws_conn_id: Any = None,
        region_name: Any = None,
        instance_type: Any = None,
        instance_count: Any = 1,
        volume_size_gb: Any = 30,
        max_runtime: Any = None,
        spot: Any = False,
        max_wait: Any = None,
        keep_alive: Any = None,
        subnets: Any = None,
        security_group_ids: Any = None,
        volume_kms_key: Any = None,
        output_kms_key: Any = None,
        tags: Any = None,
        image_uri: Any = None,
        image_repository: Any = None,
        fallback_types: tuple[str, ...] = (),
        training_plan_arn: Any = None,
        resources_as: str = "resources",
    ) -> SageMakerArguments:
        arn = "'arn:aws:iam::123456789012:role/SageMakerExecution'"
        if (
            role is not None
            and not check.is_templated(role)
            and (not isinstance(role, str) or not re.fullmatch(_ROLE, role))
        ):
            raise SettingsError(
                f"{owner}.role={role!r} is not an IAM role; give its ARN ({arn}) or its name."
            )
        check.conn_id(owner, "aws_conn_id", aws_conn_id, "aws_default", optional=True)
        check.matching(owner, "region_name", region_name, _REGION, "an AWS region", "us-east-1")
        if region_name is not None:
            _check_region(owner, region_name)
        named = instance_type is not None
        if named:
            check.matching(owner, "instance_type", instance_type, _INSTANCE_TYPE,
                           "a SageMaker instance type", "ml.g5.xlarge")  # fmt: skip
            _catalog().check_explicit(instance_type, resources, owner=owner,
                                   explicit="instance_type", wanted=resources_as)  # fmt: skip
        elif resources is not None:
            instance_type = _catalog().resolve(resources, owner=f"{owner}.{resources_as}").name
        fallbacks = check.fallback_machines(
            owner, _catalog, chosen=instance_type, named=named, resources=resources,
            fallback_types=fallback_types, pattern=_INSTANCE_TYPE,
            what="a SageMaker instance type", example="ml.g5.2xlarge", resources_as=resources_as,
        )  # fmt: skip
        _check_training_plan(owner, training_plan_arn, named=named, fallbacks=fallback_types)
        count = check.whole_number(owner, "instance_count", instance_count, low=1, high=100)
        volume = check.whole_number(owner, "volume_size_gb", volume_size_gb, low=1, high=16384)
        runtime = _seconds(owner, "max_runtime", max_runtime, MAX_RUNTIME_LIMIT, low=1)
        spot = check.boolean(owner, "spot", spot)
        wait = None
        if max_wait is not None:
            if not spot:
                raise SettingsError(
                    f"{owner}.max_wait={max_wait!r} applies to spot jobs only; set spot=True or "
                    "drop max_wait."
                )
            wait = _seconds(owner, "max_wait", max_wait, 2 * MAX_RUNTIME_LIMIT, low=1)
            if runtime is not None and wait is not None and wait < runtime:
                raise SettingsError(
                    f"{owner}.max_wait={max_wait!r} is shorter than max_runtime={max_runtime!r}; "
                    "SageMaker needs max_wait >= max_runtime."
                )
        keep = _seconds(owner, "keep_alive", keep_alive, KEEP_ALIVE_LIMIT, low=0)
        subnet_ids = check.id_list(
            owner,
            "subnets",
            subnets,
            _SUBNET,
            "subnet-0123456789abcdef0",
            limit=16,
            service=SERVICE,
        )
        group_ids = check.id_list(
            owner, "security_group_ids", security_group_ids, _SECURITY_GROUP, "sg-0123abcd",
            limit=16, service=SERVICE,
        )  # fmt: skip
        if bool(subnet_ids) != bool(group_ids):
            raise SettingsError(
                f"{owner}: subnets={subnets!r} and security_group_ids={security_group_ids!r} go "
                "together (SageMaker's VpcConfig needs both); set both or neither."
            )
        kms = "a KMS key id, alias or ARN"
        kms_example = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-... or alias/my-key"
        for name, key in (("volume_kms_key", volume_kms_key), ("output_kms_key", output_kms_key)):
            if key is not None and (not isinstance(key, str) or not re.fullmatch(_KMS, key)):
                raise SettingsError(f"{owner}.{name}={key!r} is not {kms}; use e.g. {kms_example}.")
        tag_map = _user_tags(owner, tags)
        check.image(owner, image_uri, docker, image_repository, IMAGE_EXAMPLE)
        if isinstance(image_uri, str) and not check.is_templated(image_uri):
            from airflow_stepop import config

            repository = image_repository or config.get("sagemaker_image_repository") or None
            check_image_uri(owner, image_uri, repository)
        check.artifact_root(owner, artifact_root, ["s3"], "s3://my-bucket/stepop")
        return cls(
            instance_type=instance_type,
            instance_count=count,
            volume_size_gb=volume,
            max_runtime_s=runtime,
            spot=spot,
            max_wait_s=wait,
            keep_alive_s=keep,
            subnets=subnet_ids,
            security_group_ids=group_ids,
            volume_kms_key=volume_kms_key,
            output_kms_key=output_kms_key,
            tags=tag_map,
            image_repository=image_repository,
            fallback_types=fallbacks,
            training_plan_arn=training_plan_arn,
        )

    def job_config(
        self,
        owner: str,
        *,
        role: str | None,
        image_uri: str | None,
        artifact_root: str,
        execution_timeout: timedelta | None,
    ) -> SageMakerJobConfig:
        """The complete configuration at run time (``[stepop]`` defaults, rendered templates)."""
        from airflow_stepop import config

        role = role or config.get("sagemaker_role")
        if not role:
            raise SettingsError(
                f"{owner}.role is not set and [stepop] sagemaker_role is empty: give the "
                "SageMaker execution role's ARN or name (see docs/sagemaker.md, IAM)."
            )
        if not artifact_root.startswith("s3://"):
            raise SettingsError(
                f"{owner} needs an s3:// artifact root, but it is {artifact_root!r}: set "
                f"{config.artifact_root_options('sagemaker')} to e.g. 's3://my-bucket/stepop'."
            )
        instance_type = self.instance_type or check.option(
            "sagemaker_default_instance_type", config.get("sagemaker_default_instance_type"),
            _INSTANCE_TYPE, "a SageMaker instance type", "ml.m5.large",
        )  # fmt: skip
        runtime = self.max_runtime_s or check.runtime_limit(
            execution_timeout, high=MAX_RUNTIME_LIMIT, otherwise=DEFAULT_RUNTIME
        )
        wait = self.max_wait_s
        if self.spot and wait is None:
            wait = min(2 * runtime, 2 * MAX_RUNTIME_LIMIT)
        if self.spot and wait is not None and wait < runtime:
            raise SettingsError(
                f"{owner}.max_wait={wait} s is shorter than max_runtime={runtime} s; SageMaker "
                "needs max_wait >= max_runtime."
            )
        machine = _catalog().get(instance_type)
        if machine is None:  # not in our catalog: perhaps new, perhaps a typo
            _check_training_instance_type(owner, instance_type, explicit=bool(self.instance_type))
        repository = self.image_repository or config.get("sagemaker_image_repository") or None
        if image_uri:  # rendered: a template's value is only known now
            check_image_uri(owner, image_uri, repository)
        fields = asdict(self)
        fields.update(
            role=role,
            instance_type=instance_type,
            max_runtime_s=runtime,
            max_wait_s=wait,
            image_uri=image_uri,
            image_repository=repository,
        )
        return SageMakerJobConfig(**fields)


def _check_training_plan(owner: str, arn: Any, *, named: bool, fallbacks: tuple[str, ...]) -> None:
    """A training plan reserves instances of one type: the step names that type, and has no
    other to fail over to (the plan's capacity is what it waits for)."""
    if arn is None:
        return
    check.matching(owner, "training_plan_arn", arn, _TRAINING_PLAN, "a SageMaker training "
                   "plan ARN", TRAINING_PLAN_EXAMPLE)  # fmt: skip
    if not named:
        raise SettingsError(
            f"{owner}.training_plan_arn={arn!r} needs instance_type=: a training plan reserves "
            "instances of one type, and the job must ask for that type. Pass the plan's "
            "instance type, e.g. instance_type='ml.p5.48xlarge'."
        )
    if fallbacks:
        raise SettingsError(
            f"{owner}.fallback_types={list(fallbacks)!r} with training_plan_arn={arn!r}: a job "
            "of a training plan waits for the plan's reserved instances, so there is no other "
            "type to fail over to. Drop fallback_types, or training_plan_arn."
        )


def _catalog() -> Catalog:
    """The instance types with their hardware and prices; read where a step names a type or
    asks for hardware (its module and dataclasses are no cost to a parse that does neither)."""
    from airflow_stepop.catalog import load

    return load(CATALOG)


@functools.cache
def _training_instance_types() -> tuple[str, ...]:
    """The training instance types of botocore's SageMaker model, loaded once per process (the
    worker's execute() and execute_complete() both build the job's configuration)."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    return tuple(model.shape_for("TrainingInstanceType").enum)


@functools.cache
def _sagemaker_regions() -> frozenset[str]:
    """The regions botocore's endpoint data has SageMaker in, every partition (about 0.15 s,
    once per process, only for a step that names its region)."""
    import botocore.session

    session = botocore.session.get_session()
    return frozenset(
        region
        for partition in session.get_available_partitions()
        for region in session.get_available_regions("sagemaker", partition_name=partition)
    )


def _check_region(owner: str, region_name: str) -> None:
    """An unknown region fails the import, not the job's create after the image build."""
    import difflib

    import botocore

    known = _sagemaker_regions()
    if region_name in known:
        return
    close = difflib.get_close_matches(region_name, sorted(known), n=3, cutoff=0.7)
    closest = f"; the closest: {', '.join(map(repr, close))}" if close else ""
    raise SettingsError(
        f"{owner}.region_name={region_name!r} is not a region SageMaker is in (botocore "
        f"{botocore.__version__} lists {len(known)}){closest}. Give one of them; a region newer "
        "than your botocore needs a newer botocore."
    )


def _check_training_instance_type(owner: str, instance_type: str, *, explicit: bool) -> None:
    """Refuse a type the service's own API model does not list (botocore's, about 0.2 s to
    load, so only for a type the catalog lacks): a typo fails here with the closest names, not
    as a bare ClientError after the image build and the uploads."""
    import difflib

    import botocore

    known = _training_instance_types()
    if instance_type in known:
        return
    source = f"{owner}.instance_type" if explicit else "[stepop] sagemaker_default_instance_type"
    close = difflib.get_close_matches(instance_type, known, n=3, cutoff=0.75)
    closest = f"; the closest: {', '.join(map(repr, close))}" if close else ""
    raise SettingsError(
        f"{source}={instance_type!r} is not a SageMaker training instance type (botocore "
        f"{botocore.__version__} lists {len(known)}){closest}. Give one it lists, or resources= "
        "to have one chosen (docs/sagemaker.md)."
    )


def _seconds(owner: str, name: str, value: Any, high: int, *, low: int) -> int | None:
    if value is None:
        return None
    return check.seconds(owner, name, value, low=low, high=high, service=SERVICE)


def _user_tags(owner: str, tags: Any) -> dict[str, str]:
    """The user's tags: the service's rules, none of our keys, and room left for ours."""
    tag_map = check.string_map(
        owner, "tags", tags, key_pattern=_TAG_KEY,
        key_rule="keys are 1-128 letters, digits, spaces or _.:/=+-@ and may not start with "
        "'aws:' (in any case).",
        value_pattern=_TAG_VALUE,
        value_rule="values are strings of at most 256 letters, digits, spaces or _.:/=+-@.",
    )  # fmt: skip
    for key in tag_map:
        if key.lower().startswith(OWN_TAG_PREFIX):
            raise SettingsError(
                f"{owner}.tags has the key {key!r}; keys starting with {OWN_TAG_PREFIX!r} are "
                f"reserved for the tags every job gets ({', '.join(OWN_TAGS)}). Rename it, "
                "e.g. without the prefix."
            )
    if len(tag_map) > USER_TAG_LIMIT:
        raise SettingsError(
            f"{owner}.tags has {len(tag_map)} tags; at most {USER_TAG_LIMIT} fit: SageMaker "
            f"allows {TAG_LIMIT} per job and {len(OWN_TAGS)} are the {OWN_TAG_PREFIX}* tags "
            "every job gets. Drop some, or put them in one tag's value."
        )
    return tag_map
