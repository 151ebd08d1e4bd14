"""KubernetesStepOperator: the callable runs as a Job on a Kubernetes cluster (docs/kubernetes.md).

Only the arguments are declared here; their rules live in ``backends/kubernetes/config.py`` and
are applied now, at DAG parse time, so a wrong value fails the import before any API call.
What an unset argument falls back to (``[stepop] kubernetes_*`` options, the connection's
namespace) is read when the task runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_stepop.backends import arguments as check
from airflow_stepop.backends.kubernetes.config import STORE_CONNECTIONS, KubernetesJobConfig
from airflow_stepop.operators.base import BaseStepOperator

if TYPE_CHECKING:  # imported in make_backend(): a DAG file's parse does not need it
    from airflow_stepop.backends.kubernetes.backend import KubernetesBackend


class KubernetesStepOperator(BaseStepOperator):
    """Run ``python_callable`` as a ``batch/v1`` Job; results come back as references.

    :param kubernetes_conn_id: the cncf.kubernetes provider's connection (in-cluster, a
        kubeconfig file or an inline kubeconfig; its ``namespace`` extra).
    :param namespace: the Job's namespace (default ``[stepop] kubernetes_namespace``, then the
        connection's, then ``default``).
    :param image_uri: a prebuilt image with python3; no build.
    :param image_repository: where a ``docker=`` image that needs a build is pushed (default
        ``[stepop] kubernetes_image_repository``): a registry the cluster pulls from.
    :param instance_count: pods of the step (> 1: an Indexed Job, torch-style rank env).
    :param max_runtime: ``activeDeadlineSeconds``; default the task's ``execution_timeout``
        plus 5 minutes, else 7 days.
    :param ttl_after_finished: how long a finished Job is kept (``ttlSecondsAfterFinished``;
        at least 10 minutes; default 7 days).
    :param schedule_timeout: how long a pod may wait for a node before the step fails (default
        ``[stepop] kubernetes_schedule_timeout``, 30 minutes).
    :param service_account_name: the pods' service account (default: none mounted).
    :param node_selector: node labels the pods need, e.g. a node pool's.
    :param tolerations: taints the pods tolerate (the GPU taint is tolerated for a GPU step).
    :param image_pull_secrets: Secrets of the namespace to pull the image with.
    :param labels: extra labels of the Job and its pods.
    :param annotations: extra annotations of the Job and its pods.
    :param priority_class_name: the pods' PriorityClass.
    :param queue_name: a Kueue LocalQueue: the Job is created suspended and waits for admission.
    :param gpu_resource: the extended resource GPUs are asked as (default ``[stepop]
        kubernetes_gpu_resource``, ``nvidia.com/gpu``).
    :param gpu_label: the node label ``gpu_type`` selects on (default ``[stepop]
        kubernetes_gpu_label``, ``nvidia.com/gpu.product``).
    :param artifact_volume: for a ``file://`` artifact root: the volume that holds it (e.g.
        ``{"persistentVolumeClaim": {"claimName": "stepop-artifacts"}}``), mounted at its path.
    :param storage_conn_id: the connection that reaches (and signs URLs for) the artifact
        root; default the store's own default connection (``aws_default`` for ``s3://``,
        ``google_cloud_default`` for ``gs://``; for ``abfs://``, ``abfss://`` and ``az://`` none:
        adlfs's ambient credentials, as Azure ML steps).
    """

    service = "kubernetes"
    connection_argument = "kubernetes_conn_id"
    template_fields = (*BaseStepOperator.template_fields, "image_uri")

    def __init__(
        self,
        *,
        kubernetes_conn_id: str = "kubernetes_default",
        namespace: str | None = None,
        image_uri: str | None = None,
        image_repository: str | None = None,
        instance_count: int = 1,
        max_runtime: timedelta | int | None = None,
        ttl_after_finished: timedelta | int | None = None,
        schedule_timeout: timedelta | int | None = None,
        service_account_name: str | None = None,
        node_selector: Mapping[str, str] | None = None,
        tolerations: Sequence[Mapping[str, Any]] | None = None,
        image_pull_secrets: str | Sequence[str] | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        priority_class_name: str | None = None,
        queue_name: str | None = None,
        gpu_resource: str | None = None,
        gpu_label: str | None = None,
        artifact_volume: Mapping[str, Any] | None = None,
        storage_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.refuse_failover(
            "a Kubernetes step's pod waits for a node with room (schedule_timeout=), with no "
            "machine types to fail over between. Drop it, or list the node pools it may use "
            "with node_selector= or tolerations=."
        )
        self.kubernetes_conn_id = check.conn_id(
            self.argument_owner, "kubernetes_conn_id", kubernetes_conn_id, "kubernetes_default"
        )
        self._storage_conn_id = check.conn_id(
            self.argument_owner, "storage_conn_id", storage_conn_id, "aws_default", optional=True
        )
        self.job_config = KubernetesJobConfig.from_arguments(
            self.argument_owner,
            resources=self.resource_settings, docker=self.docker_settings,
            artifact_root=self.artifact_root, namespace=namespace, image_uri=image_uri,
            image_repository=image_repository, instance_count=instance_count,
            max_runtime=max_runtime, execution_timeout=self.execution_timeout,
            ttl_after_finished=ttl_after_finished, schedule_timeout=schedule_timeout,
            service_account_name=service_account_name, node_selector=node_selector,
            tolerations=tolerations, image_pull_secrets=image_pull_secrets, labels=labels,
            annotations=annotations, priority_class_name=priority_class_name,
            queue_name=queue_name, gpu_resource=gpu_resource, gpu_label=gpu_label,
            artifact_volume=artifact_volume,
        )  # fmt: skip
        self.image_uri = image_uri

    @property
    def storage_conn_id(self) -> str | None:
        """The given connection, else the artifact store's usual one (``STORE_CONNECTIONS``)."""
        if self._storage_conn_id is not None:
            return self._storage_conn_id
        scheme = self.step_artifact_root().split("://", 1)[0]
        return STORE_CONNECTIONS.get(scheme)

    def make_backend(self) -> KubernetesBackend:
        from airflow_stepop.backends.kubernetes.backend import KubernetesBackend
        from airflow_stepop.backends.kubernetes.clients import read_access

        access = read_access(self.kubernetes_conn_id)
        job = self.job_config.completed(
            self.argument_owner,
            artifact_root=self.step_artifact_root(),
            connection_namespace=access.namespace,
            image_uri=self.image_uri,  # rendered
        )
        return KubernetesBackend(
            kubernetes_conn_id=self.kubernetes_conn_id,
            job=job,
            storage_conn_id=self.storage_conn_id,
        )
