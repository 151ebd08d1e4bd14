"""VertexStepOperator: the callable runs as a Vertex AI CustomJob (see docs/vertex.md).

Only the arguments are declared here; their rules live in ``backends/vertex/config.py`` and are
applied now, at DAG parse time, so a wrong value (or a ``resources=`` nothing fits) fails the
import before any API call. What an unset argument falls back to (``[stepop]`` options) is read
when the task runs (``completed``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_stepop.backends.vertex.config import VertexJobConfig, access_arguments
from airflow_stepop.links.job import StepExperimentLink, StepJobLink, StepLogsLink
from airflow_stepop.operators.base import BaseStepOperator

if TYPE_CHECKING:  # imported in make_backend(): a DAG file's parse does not need it
    from airflow_stepop.backends.vertex.backend import VertexBackend


class VertexStepOperator(BaseStepOperator):
    """Run ``python_callable`` as a Vertex AI CustomJob; results come back as references.

    :param gcp_conn_id: the google provider's connection (credentials, project, and the
        ``location``, ``vertex_endpoint`` and ``logging_endpoint`` extras).
    :param project_id: overrides the connection's project.
    :param location: Vertex region (default: the connection's ``location`` extra, then
        ``[stepop] vertex_location``).
    :param machine_type: an explicit machine type; wins over ``resources=``.
    :param accelerator_type: e.g. ``NVIDIA_TESLA_T4`` (with an n1 machine type).
    :param accelerator_count: GPUs per machine (default 1 with accelerator_type).
    :param replica_count: machines of the job (> 1: multi-node, torch-style rank env).
    :param boot_disk_size_gb: boot disk per machine (100..64000).
    :param max_runtime: ``scheduling.timeout``; default the task's ``execution_timeout`` plus 5
        minutes (the trigger cancels the job at the deadline), else 7 days.
    :param spot: Spot VMs (``scheduling.strategy=SPOT``); ``$STEPOP_CHECKPOINT_DIR``, which
        every job has, survives a preemption.
    :param flex_start: Dynamic Workload Scheduler (``scheduling.strategy=FLEX_START``): the job
        waits in Vertex AI's queue for its L4, A100, H100, H200 or B200 GPUs instead of failing.
    :param flex_start_max_wait: the longest it waits (``scheduling.maxWaitDuration``, timedelta
        or seconds; 0: no limit); default Vertex AI's, one day.
    :param restart_on_worker_restart: ``scheduling.restartJobOnWorkerRestart``.
    :param service_account: the job's service account (default: Vertex's service agent).
    :param network: VPC network to peer, ``projects/NUMBER/global/networks/NAME``.
    :param encryption_key: Cloud KMS key (CMEK) of the job.
    :param labels: extra job labels (the Airflow ids are added).
    :param image_uri: a prebuilt image with python3; no build.
    :param image_repository: where built images are pushed (default
        ``[stepop] vertex_image_repository``, else
        ``LOCATION-docker.pkg.dev/PROJECT/airflow-stepop``).
    :param impersonation_chain: service account(s) to impersonate for every API call.
    :param persistent_resource_id: run on a Vertex persistent resource (a warm pool).
    :param experiment: a Vertex AI Experiments name: the job is logged as a run of it.
    """

    service = "vertex"
    connection_argument = "gcp_conn_id"
    queued_capacity_arguments = ("flex_start=", "flex_start_max_wait=")

    operator_extra_links = (StepJobLink(), StepLogsLink(), StepExperimentLink())
    template_fields = (*BaseStepOperator.template_fields, "image_uri")

    def __init__(
        self,
        *,
        gcp_conn_id: str = "google_cloud_default",
        project_id: str | None = None,
        location: str | None = None,
        machine_type: str | None = None,
        accelerator_type: str | None = None,
        accelerator_count: int | None = None,
        replica_count: int = 1,
        boot_disk_size_gb: int = 100,
        max_runtime: timedelta | int | None = None,
        spot: bool = False,
        restart_on_worker_restart: bool = False,
        service_account: str | None = None,
        network: str | None = None,
        encryption_key: str | None = None,
        labels: Mapping[str, str] | None = None,
        image_uri: str | None = None,
        image_repository: str | None = None,
        impersonation_chain: str | Sequence[str] | None = None,
        persistent_resource_id: str | None = None,
        experiment: str | None = None,
        flex_start: bool = False,
        flex_start_max_wait: timedelta | int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.gcp_conn_id, self.project_id, self.location, self.impersonation_chain = (
            access_arguments(
                self.argument_owner, gcp_conn_id, project_id, location, impersonation_chain
            )
        )
        self.job_config = VertexJobConfig.from_arguments(
            self.argument_owner,
            resources=self.resource_settings, resources_as=self.resources_as,
            docker=self.docker_settings,
            artifact_root=self.artifact_root, execution_timeout=self.execution_timeout,
            machine_type=machine_type, accelerator_type=accelerator_type,
            accelerator_count=accelerator_count, replica_count=replica_count,
            boot_disk_size_gb=boot_disk_size_gb, max_runtime=max_runtime, spot=spot,
            restart_on_worker_restart=restart_on_worker_restart, service_account=service_account,
            network=network, encryption_key=encryption_key, labels=labels, image_uri=image_uri,
            image_repository=image_repository, persistent_resource_id=persistent_resource_id,
            experiment=experiment, environment=self.environment,
            fallback_types=self.fallback_types, flex_start=flex_start,
            flex_start_max_wait=flex_start_max_wait,
        )  # fmt: skip
        self.image_uri = image_uri

    @property
    def storage_conn_id(self) -> str | None:
        return self.gcp_conn_id

    def make_backend(self) -> VertexBackend:
        from airflow_stepop.backends.vertex.backend import VertexBackend

        job = self.job_config.completed(
            self.argument_owner,
            artifact_root=self.step_artifact_root(),
            image_uri=self.image_uri,  # rendered
        )
        return VertexBackend(
            gcp_conn_id=self.gcp_conn_id,
            project_id=self.project_id,
            location=self.location,
            impersonation_chain=self.impersonation_chain,
            job=job,
        )
