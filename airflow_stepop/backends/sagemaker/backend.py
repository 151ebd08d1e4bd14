"""The SageMaker backend: a step runs as a SageMaker training job.

The worker's SageMaker calls live in this module, the triggerer's in ``triggerer_calls.py``
(inherited), what its answers mean in ``job.py``, the request's shape in ``launch.py``. How a
step becomes a job:

* image (``image.py``): ``image_uri`` as given, else the ``DockerSettings`` image
  (content-hash tag) built or copied, pushed only when the registry lacks the tag;
* channels (File mode, S3Prefix): ``code`` = the code bundle object, ``run`` = the attempt's run
  directory (spec, inputs, the entry script and its launch document), ``in1``.. = the prefixes of
  upstream ``ArtifactRef`` inputs (grouped so that at most 20 channels are used);
* ``ContainerEntrypoint`` = ``python3 /opt/ml/input/data/run/stepop_entry.py /opt/ml``
  (``entry.py``): it exports the path map (S3 prefix -> channel directory, and the
  output prefix -> /opt/ml/model), rank variables from resourceconfig.json and long environment
  values, then runs ``python3 -m airflow_stepop.runtime <spec>`` from the bundle. The image needs
  no AWS SDK: the service downloads channels and uploads /opt/ml/model (CompressionType NONE) to
  ``<run_uri>/<job>/output/model``, which is where result refs point (the handle's output_uri);
* the deterministic job name comes from ``naming.job_name``; ``find_active`` re-attaches to an
  InProgress job of the same task instance (ListTrainingJobs NameContains the key prefix);
* the triggerer side (``triggerer_calls.py``) uses the amazon provider's async hooks
  (aiobotocore): ListTrainingJobs pages for the shared poller (DescribeTrainingJob for a job
  they leave out and once per ended job), CloudWatch Logs with one cursor (nextForwardToken)
  per stream and a bounded request rate, StopTrainingJob on kill.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_stepop.backends.base import (
    JobNameTakenError,
    JobRecord,
    JobRequest,
    JobStatus,
    MachineChoice,
    NoCapacityError,
    PreparedJob,
    StepBackend,
    service_refusal,
)
from airflow_stepop.backends.bootstrap import (
    TRY_ID_ENV,
    bootstrap_environment,
    read_staged_spec,
)
from airflow_stepop.backends.naming import task_digest
from airflow_stepop.backends.ratelimit import list_limiter
from airflow_stepop.backends.sagemaker.clients import Clients
from airflow_stepop.backends.sagemaker.config import CATALOG, SageMakerJobConfig
from airflow_stepop.backends.sagemaker.image import job_image
from airflow_stepop.backends.sagemaker.job import (
    console_links,
    error_code,
    estimate_cost,
    is_gone_error,
    is_transient_error,
    map_status,
)
from airflow_stepop.backends.sagemaker.launch import (
    ENTRY_FILE,
    LAUNCH_FILE,
    build_launch,
    entrypoint,
    sanitize_tag,
)
from airflow_stepop.backends.sagemaker.triggerer_calls import SageMakerTriggererCalls
from airflow_stepop.catalog import load as load_catalog
from airflow_stepop.images.builder import ImageChoice
from airflow_stepop.runtime.spec import SPEC_SHA256_ENV
from airflow_stepop.runtime.storage import join
from airflow_stepop.setting_values import SettingsError

if TYPE_CHECKING:
    from airflow_stepop.settings import DockerSettings

log = logging.getLogger(__name__)

CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"


def own_name_pattern(digest: str) -> re.Pattern[str]:
    """The job names of a task instance's tries: ``...-<digest>-t<try>``, or the one a try
    took when another try's job held its own (``submit_as_own``: ``-t<try>-<salt>``)."""
    return re.compile(rf"-{re.escape(digest)}-t\d+(-[A-Za-z0-9]+)?$")


class SageMakerBackend(SageMakerTriggererCalls, StepBackend):
    """Runs steps as SageMaker training jobs through the amazon provider's hooks."""

    # A training job takes minutes to provision: 5, 10, 20 s... then poll_interval.
    first_poll_seconds = 5.0

    def __init__(
        self,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        job: SageMakerJobConfig | None = None,
    ) -> None:
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.job = job
        self._clients = Clients(aws_conn_id, region_name)
        self._phase: dict[str, str] = {}  # job -> last SecondaryStatus seen by astatus
        self._final: set[str] = set()

    def serialize(self) -> dict[str, Any]:
        return {"aws_conn_id": self.aws_conn_id, "region_name": self.region_name}

    # ---- connection --------------------------------------------------------------------

    @property
    def region(self) -> str:
        return self.region_name or self._clients.hook("sagemaker").conn_region_name or "us-east-1"

    def _storage(self) -> Any:
        from airflow_stepop.artifacts.storage import worker_storage

        return worker_storage(self.aws_conn_id)

    # ---- worker side -------------------------------------------------------------------

    def prepare(self, request: JobRequest) -> PreparedJob:
        """Stage the entry script and launch document, decide the image (built by the worker's
        engine, or by CodeBuild while the task is deferred) and make the CreateTrainingJob
        request."""
        if self.job is None:
            raise RuntimeError("SageMakerBackend.prepare needs a job configuration")
        job = self.job
        if request.machine:  # a failover's next instance type (``machine_choices``)
            job = dataclasses.replace(job, instance_type=request.machine)
        storage = self._storage()
        spec = read_staged_spec(storage, request)
        channels, launch, environment, output_uri = build_launch(request, spec, request.job_name)
        environment["STEPOP_CHECKPOINT_DIR"] = CHECKPOINT_LOCAL_PATH
        environment.update(bootstrap_environment(request.spec_sha256, request.try_id))
        role = self._role_arn(job.role)  # before the image: a build takes minutes
        image = self._image(request, storage)
        entry_source = (Path(__file__).parent / "entry.py").read_bytes()
        launch_bytes = json.dumps(launch).encode()
        storage.write_bytes(join(request.run_uri, ENTRY_FILE), entry_source)
        storage.write_bytes(join(request.run_uri, LAUNCH_FILE), launch_bytes)

        body: dict[str, Any] = {
            "TrainingJobName": request.job_name,
            "RoleArn": role,
            "AlgorithmSpecification": {
                "TrainingImage": image.reference,
                "TrainingInputMode": "File",
                "ContainerEntrypoint": entrypoint(request, entry_source, launch_bytes),
            },
            "InputDataConfig": channels,
            "OutputDataConfig": {"S3OutputPath": request.run_uri, "CompressionType": "NONE"},
            "ResourceConfig": {
                "InstanceType": job.instance_type,
                "InstanceCount": job.instance_count,
                "VolumeSizeInGB": job.volume_size_gb,
            },
            "StoppingCondition": {"MaxRuntimeInSeconds": job.max_runtime_s},
            "Environment": environment,
            "Tags": self._tags(request),
        }
        if job.keep_alive_s:
            body["ResourceConfig"]["KeepAlivePeriodInSeconds"] = job.keep_alive_s
        if job.training_plan_arn:
            body["ResourceConfig"]["TrainingPlanArn"] = job.training_plan_arn
        if job.volume_kms_key:
            body["ResourceConfig"]["VolumeKmsKeyId"] = job.volume_kms_key
        if job.output_kms_key:
            body["OutputDataConfig"]["KmsKeyId"] = job.output_kms_key
        if job.subnets:
            body["VpcConfig"] = {
                "Subnets": list(job.subnets),
                "SecurityGroupIds": list(job.security_group_ids),
            }
        # every job's, shared by the task instance's tries: a retry resumes as a spot job does
        body["CheckpointConfig"] = {
            "S3Uri": request.checkpoint_uri + "/",
            "LocalPath": CHECKPOINT_LOCAL_PATH,
        }
        if job.spot:
            body["EnableManagedSpotTraining"] = True
            body["StoppingCondition"]["MaxWaitTimeInSeconds"] = job.max_wait_s
        spot = ", spot" if job.spot else ""
        handle = {
            "job_id": request.job_name,
            "task_key": request.task_key,
            "run_uri": request.run_uri,
            "output_uri": output_uri,
            "region": self.region,
            "image": image.reference,
            "image_built": image.built or image.build is not None,
            "machine": f"{job.instance_type} x {job.instance_count}{spot}",
            "price_per_hour": self._hourly_price(job),
        }
        prepared = {"request": body, "handle": handle, "try_id": request.try_id}
        return PreparedJob(prepared, image.build)

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        """CreateTrainingJob; a job of the name that exists is this try's own only when its
        environment carries this try's id (its first answer was lost), else another's."""
        request, handle = body["request"], body["handle"]
        name = request["TrainingJobName"]
        client = self._clients.hook("sagemaker").conn
        try:
            client.create_training_job(**request)
        except Exception as exc:
            if error_code(exc) == "ValidationException":  # an image it cannot find, say
                reason = exc.response["Error"].get("Message") or str(exc)  # type: ignore[attr-defined]
                raise service_refusal("SageMaker", reason) from exc
            if error_code(exc) == "ResourceLimitExceeded":  # a quota for the instance type
                message = exc.response["Error"].get("Message") or str(exc)  # type: ignore[attr-defined]
                instance_type = request["ResourceConfig"]["InstanceType"]
                raise NoCapacityError(instance_type, f"ResourceLimitExceeded: {message}") from exc
            if error_code(exc) != "ResourceInUse":
                raise
            existing = client.describe_training_job(TrainingJobName=name)
            owner = (existing.get("Environment") or {}).get(TRY_ID_ENV)
            if body.get("try_id") and owner != body["try_id"]:
                raise JobNameTakenError(name, owner) from None
            # A retried create whose first answer was lost: the job is this try's own.
            log.info("Training job %s exists already; attaching to it", name)
        log.info("Training job %s: %s, image %s", name, handle["machine"], handle["image"])
        return dict(handle)

    def machine_choices(self) -> tuple[MachineChoice, ...]:
        if self.job is None or not self.job.instance_type:
            return ()
        return tuple(
            MachineChoice(
                name, self._hourly_price(dataclasses.replace(self.job, instance_type=name))
            )
            for name in (self.job.instance_type, *self.job.fallback_types)
        )

    @staticmethod
    def _hourly_price(job: SageMakerJobConfig) -> float | None:
        """The whole job's price per hour (spot price for spot jobs), for progress lines."""
        machine = load_catalog(CATALOG).get(job.instance_type)
        if machine is None:
            return None
        price = machine.hourly_price(job.spot)
        return None if price is None else price * job.instance_count

    def _image(self, request: JobRequest, storage: Any) -> ImageChoice:
        """The job's image (``image``): as given, built here, or a CodeBuild build to wait for."""
        assert self.job is not None
        return job_image(self, request, storage)

    def _default_repository(self) -> str:
        account = self._clients.hook("sts").conn.get_caller_identity()["Account"]
        from airflow_stepop.images.reference import DEFAULT_REPOSITORY

        return f"{account}.dkr.ecr.{self.region}.amazonaws.com/{DEFAULT_REPOSITORY}"

    def _role_arn(self, role: str) -> str:
        """A role's ARN; a name is looked up in IAM (the amazon provider's ``expand_role``)."""
        if role.startswith("arn:"):
            return role
        try:
            return self._clients.hook("sagemaker").expand_role(role)
        except Exception as exc:
            if error_code(exc) != "NoSuchEntity":
                raise
            raise SettingsError(
                f"The SageMaker execution role {role!r} (role= or [stepop] sagemaker_role) is "
                "not a role of this AWS account: give the name of an existing role, or its ARN "
                "(arn:aws:iam::<account>:role/<name>; see docs/sagemaker.md, IAM)."
            ) from None

    def _tags(self, request: JobRequest) -> list[dict[str, str]]:
        assert self.job is not None
        tags = dict(self.job.tags)  # checked: the tag alphabet, no airflow-* key, room for ours
        tags.update(
            {f"airflow-{k.replace('_', '-')}": sanitize_tag(v) for k, v in request.labels.items()}
        )
        return [{"Key": key, "Value": value} for key, value in sorted(tags.items())]

    def find_active(self, task_key: str) -> dict[str, Any] | None:
        # The key's hash is in every try's name; the readable slug before it may be cut
        # shorter for long ids and many tries, so match on the hash and the try suffix.
        digest = task_digest(task_key)
        client = self._clients.hook("sagemaker").conn
        list_limiter(self.poll_group()).acquire()
        answer = client.list_training_jobs(
            NameContains=f"-{digest}-t", StatusEquals="InProgress", MaxResults=10
        )
        own = own_name_pattern(digest)
        for summary in answer.get("TrainingJobSummaries", []):
            name = summary["TrainingJobName"]
            if not own.search(name):
                continue
            description = client.describe_training_job(TrainingJobName=name)
            return self.handle_from_description(description, task_key)
        return None

    def handle_from_description(self, description: dict[str, Any], task_key: str) -> dict[str, Any]:
        name = description["TrainingJobName"]
        run_uri = ""
        for channel in description.get("InputDataConfig", []):
            if channel["ChannelName"] == "run":
                run_uri = channel["DataSource"]["S3DataSource"]["S3Uri"].rstrip("/")
        output = description["OutputDataConfig"]["S3OutputPath"].rstrip("/")
        return {
            "job_id": name,
            "task_key": task_key,
            "run_uri": run_uri or output,
            "output_uri": f"{output}/{name}/output/model",
            "region": self.region,
        }

    def describe(self, handle: dict[str, Any]) -> dict[str, Any]:
        return self._clients.hook("sagemaker").conn.describe_training_job(
            TrainingJobName=handle["job_id"]
        )

    def stop(self, handle: dict[str, Any]) -> None:
        try:
            self._clients.hook("sagemaker").conn.stop_training_job(TrainingJobName=handle["job_id"])
        except Exception as exc:
            if error_code(exc) != "ValidationException":  # already ended: nothing to stop
                raise

    def links(self, handle: dict[str, Any]) -> dict[str, str]:
        return console_links(handle.get("region") or self.region, handle["job_id"])

    def poll_group(self) -> str:
        """SageMaker throttles per account and region: one connection and region, one group."""
        return f"sagemaker:{self.aws_conn_id}:{self.region_name or ''}"

    billing_xcom_key = "sagemaker_billing"

    def billing(self, details: dict[str, Any]) -> dict[str, Any] | None:
        if not details.get("BillableTimeInSeconds"):
            return None
        catalog = load_catalog(CATALOG)
        machine = catalog.get(details.get("ResourceConfig", {}).get("InstanceType", ""))
        spot = bool(details.get("EnableManagedSpotTraining"))
        price = None if machine is None else machine.hourly_price(spot)
        return estimate_cost(details, price, catalog.date)

    def status(self, handle: dict[str, Any]) -> JobStatus:
        return map_status(self.describe(handle))

    def environment_id(self, docker: DockerSettings | None) -> str:
        if self.job is not None and self.job.image_uri:  # keyed by its name: see the README
            return f"image:{self.job.image_uri}"
        return super().environment_id(docker)

    def job_record(self, job_id: str) -> JobRecord:
        """One DescribeTrainingJob in this backend's account and region."""
        description = self.describe({"job_id": job_id})
        spec_sha256 = (description.get("Environment") or {}).get(SPEC_SHA256_ENV)
        handle = self.handle_from_description(description, task_key="")
        return JobRecord(map_status(description), spec_sha256, handle)

    def is_transient(self, exc: Exception) -> bool:
        return is_transient_error(exc)

    def is_gone(self, exc: Exception) -> bool:
        return is_gone_error(exc)


__all__ = [
    "SageMakerBackend",
    "SageMakerJobConfig",
    "build_launch",
]
