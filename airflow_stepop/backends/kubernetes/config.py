"""KubernetesStepOperator's argument rules: keyword arguments -> a frozen ``KubernetesJobConfig``.

Checked when the DAG is parsed, with no cluster call (``shapes`` holds Kubernetes' own rules).
What an unset argument falls back to (``[stepop] kubernetes_*`` options, the connection's
namespace) is read when the task runs (``completed``), with the worker's configuration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_stepop.backends import arguments as check
from airflow_stepop.backends.kubernetes import hardware, shapes
from airflow_stepop.setting_values import SettingsError

if TYPE_CHECKING:
    from airflow_stepop.settings import DockerSettings, ResourceSettings

# activeDeadlineSeconds of a step without execution_timeout: the others' longest (Vertex AI's)
DEFAULT_RUNTIME_S = 7 * 24 * 3600
MAX_RUNTIME_S = 30 * 24 * 3600
DEFAULT_TTL_S = 7 * 24 * 3600  # a finished Job stays a week: its logs, and the step cache's proof
# A Job gone sooner could be gone before a trigger (or a triggerer back from a restart) read
# how it ended: its task would run the step again.
MIN_TTL_S = 600
MAX_INSTANCES = 100
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Labels and annotations of ours on every Job (``manifest``): a user's may not replace them.
OUR_KEYS = (KUEUE_QUEUE_LABEL, "app.kubernetes.io/managed-by")
AZURE_SCHEMES = ("abfs", "abfss", "az")
# each store whose URLs the worker signs (``signers``), and its usual Airflow connection (on
# Azure none: adlfs's ambient credentials, as Azure ML steps reach their roots)
STORE_CONNECTIONS = {
    "s3": "aws_default",
    "gs": "google_cloud_default",
    **dict.fromkeys(AZURE_SCHEMES),
}
SCHEMES = tuple(STORE_CONNECTIONS)
IMAGE_EXAMPLE = "registry.example.com/ml/pytorch:2.5-cuda12"


@dataclass(frozen=True)
class KubernetesJobConfig:
    """A step's Job settings (what ``KubernetesBackend.prepare`` turns into manifests).

    ``namespace``, ``gpu_resource``, ``gpu_label`` and ``schedule_timeout_s`` are None until
    ``completed()`` reads their defaults."""

    namespace: str | None = None
    image_uri: str | None = None
    image_repository: str | None = None
    instance_count: int = 1
    max_runtime_s: int = DEFAULT_RUNTIME_S
    ttl_after_finished_s: int = DEFAULT_TTL_S
    schedule_timeout_s: float | None = None
    service_account_name: str | None = None
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, Any], ...] = ()
    image_pull_secrets: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    priority_class_name: str | None = None
    queue_name: str | None = None
    gpu_resource: str | None = None
    gpu_label: str | None = None
    # a volume source (persistentVolumeClaim, hostPath, nfs...) holding a file:// artifact
    # root, mounted in every pod at the root's own path
    artifact_volume: dict[str, Any] | None = None
    artifact_path: str | None = None  # where it is mounted: the root's path (``completed``)

    @classmethod
    def from_arguments(
        cls,
        owner: str,
        *,
        resources: ResourceSettings | None,
        docker: DockerSettings | None,
        artifact_root: str | None,
        namespace: Any = None,
        image_uri: Any = None,
        image_repository: Any = None,
        instance_count: Any = 1,
        max_runtime: timedelta | int | None = None,
        execution_timeout: timedelta | None = None,
        ttl_after_finished: timedelta | int | None = None,
        schedule_timeout: timedelta | int | None = None,
        service_account_name: Any = None,
        node_selector: Any = None,
        tolerations: Any = None,
        image_pull_secrets: Any = None,
        labels: Any = None,
        annotations: Any = None,
        priority_class_name: Any = None,
        queue_name: Any = None,
        gpu_resource: Any = None,
        gpu_label: Any = None,
        artifact_volume: Any = None,
    ) -> KubernetesJobConfig:
        check.image(owner, image_uri, docker, image_repository, IMAGE_EXAMPLE)
        if artifact_root is not None and not artifact_root.startswith("file://"):
            check.artifact_root(owner, artifact_root, SCHEMES, "s3://my-bucket/stepop")
        namespace = check.matching(
            owner, "namespace", namespace, shapes.DNS_LABEL,
            "a namespace name (lowercase letters, digits and '-')", "ml-jobs",
        )  # fmt: skip
        if gpu_resource is not None:
            shapes.gpu_resource(owner, "gpu_resource", gpu_resource)
        if gpu_label is not None:
            check.matching(owner, "gpu_label", gpu_label, shapes.QUALIFIED_NAME,
                           "a node label key", hardware.GFD_LABEL)  # fmt: skip
        hardware.check_gpu_request(owner, resources, gpu_label or hardware.DEFAULT_GPU_LABEL)
        return cls(
            namespace=namespace,
            image_uri=image_uri,
            image_repository=image_repository,
            instance_count=check.whole_number(
                owner, "instance_count", instance_count, low=1, high=MAX_INSTANCES
            ),
            max_runtime_s=_seconds(owner, "max_runtime", max_runtime, low=1)
            or check.runtime_limit(
                execution_timeout, high=MAX_RUNTIME_S, otherwise=DEFAULT_RUNTIME_S
            ),
            ttl_after_finished_s=_seconds(
                owner, "ttl_after_finished", ttl_after_finished, low=MIN_TTL_S
            )
            or DEFAULT_TTL_S,
            schedule_timeout_s=_seconds(owner, "schedule_timeout", schedule_timeout, low=1),
            service_account_name=check.matching(
                owner,
                "service_account_name",
                service_account_name,
                shapes.DNS_SUBDOMAIN,
                "a service account name",
                "stepop-runner",
            ),  # fmt: skip
            node_selector=shapes.node_selector(owner, "node_selector", node_selector),
            tolerations=shapes.tolerations(owner, "tolerations", tolerations),
            image_pull_secrets=shapes.secret_names(owner, "image_pull_secrets", image_pull_secrets),
            labels=shapes.labels(owner, "labels", labels, reserved=OUR_KEYS),
            annotations=shapes.annotations(owner, "annotations", annotations, reserved=OUR_KEYS),
            priority_class_name=check.matching(
                owner,
                "priority_class_name",
                priority_class_name,
                shapes.DNS_SUBDOMAIN,
                "a PriorityClass name",
                "high-priority",
            ),  # fmt: skip
            queue_name=check.matching(  # a label's value: at most 63
                owner,
                "queue_name",
                queue_name,
                f"(?=.{{1,63}}$){shapes.DNS_SUBDOMAIN}",
                "a Kueue LocalQueue name of at most 63 characters",
                "user-queue",
            ),  # fmt: skip
            gpu_resource=gpu_resource,
            gpu_label=gpu_label,
            artifact_volume=_volume_source(owner, artifact_volume, artifact_root),
        )

    def completed(self, owner: str, *, artifact_root: str, connection_namespace: str | None,
                  image_uri: str | None) -> KubernetesJobConfig:  # fmt: skip
        """The Job as it runs: defaults from ``[stepop]`` and the connection, the rendered
        image; the root the task resolved must be one its pods can reach."""
        from airflow_stepop import config

        if self.artifact_volume is not None and not artifact_root.startswith("file://"):
            raise SettingsError(
                f"{owner}.artifact_volume is for a file:// artifact root on a shared volume, "
                f"but the root is {artifact_root!r} ({config.artifact_root_options('kubernetes')}"
                "): drop artifact_volume, or set the root to the volume's file:// path."
            )
        scheme, _, rest = artifact_root.partition("://")
        if scheme in AZURE_SCHEMES and "." in rest.split("/", 1)[0].partition("@")[2]:
            raise SettingsError(
                f"{owner} has the artifact root {artifact_root!r}: Airflow reads the part "
                "before '@' as a connection id, so the worker and the pods would use different "
                f"containers. Write {scheme}://<container>/<path>, and reach the account through "
                "storage_conn_id (or the ambient AZURE_STORAGE_CONNECTION_STRING)."
            )
        if artifact_root.startswith("file://") or "://" not in artifact_root:
            if self.artifact_volume is None:
                raise SettingsError(
                    f"{owner} has the artifact root {artifact_root!r}, which is on the worker's "
                    "disk: a pod on another node cannot read it. Use an s3://, gs:// or abfs:// "
                    f"root ({config.artifact_root_options('kubernetes')}), or mount the shared "
                    "volume that holds it with artifact_volume={'persistentVolumeClaim': "
                    "{'claimName': 'stepop-artifacts'}}."
                )
        elif artifact_root.split("://", 1)[0] not in SCHEMES:
            raise SettingsError(
                f"{owner} has the artifact root {artifact_root!r}: a Kubernetes step's pod "
                "reads and writes it through signed URLs, which airflow-stepop makes for s3://, "
                "gs:// and abfs:// (abfss://, az://) roots. Set "
                f"{config.artifact_root_options('kubernetes')} to one, or use a file:// root on "
                "a shared volume (artifact_volume=)."
            )
        label = self.gpu_label or check.option(
            "kubernetes_gpu_label", config.get("kubernetes_gpu_label"), shapes.QUALIFIED_NAME,
            "a node label key", hardware.GFD_LABEL,
        )  # fmt: skip
        resource = self.gpu_resource or check.option(
            "kubernetes_gpu_resource", config.get("kubernetes_gpu_resource"),
            shapes.EXTENDED_RESOURCE, "an extended resource name", hardware.DEFAULT_GPU_RESOURCE,
        )  # fmt: skip
        namespace = self.namespace or config.get("kubernetes_namespace") or connection_namespace
        namespace = check.option(
            "kubernetes_namespace", namespace or "default", shapes.DNS_LABEL, "a namespace name",
            "ml-jobs",
        )  # fmt: skip
        artifact_path = None
        if self.artifact_volume is not None:
            from airflow_stepop.runtime.storage import Storage

            artifact_path = str(Storage().local_path(artifact_root))
        repository = self.image_repository or config.get("kubernetes_image_repository") or None
        if self.image_repository is None and repository is not None:  # no parse checked it
            from airflow_stepop.images.registry import check_repository

            try:
                check_repository(repository, "[stepop] kubernetes_image_repository",
                                 "registry.example.com/ml/env")  # fmt: skip
            except ValueError as exc:
                raise SettingsError(str(exc)) from None
        return replace(
            self,
            namespace=namespace,
            image_uri=image_uri,
            image_repository=repository,
            gpu_label=label,
            gpu_resource=resource,
            artifact_path=artifact_path,
            schedule_timeout_s=self.schedule_timeout_s
            or config.get_float("kubernetes_schedule_timeout"),
        )


def _seconds(owner: str, name: str, value: Any, *, low: int) -> int | None:
    """A duration argument (timedelta or whole seconds) up to ``MAX_RUNTIME_S``; None: unset."""
    if value is None:
        return None
    return check.seconds(owner, name, value, low=low, high=MAX_RUNTIME_S, service="Kubernetes")


_VOLUME_KINDS = ("persistentVolumeClaim", "hostPath", "nfs", "csi", "ephemeral")


def _volume_source(owner: str, value: Any, artifact_root: str | None) -> dict[str, Any] | None:
    """``artifact_volume``: one volume source of a kind that can hold a shared directory."""
    if value is None:
        return None
    example = "{'persistentVolumeClaim': {'claimName': 'stepop-artifacts'}}"
    if not isinstance(value, Mapping) or len(value) != 1 or next(iter(value)) not in _VOLUME_KINDS:
        raise SettingsError(
            f"{owner}.artifact_volume={value!r} must be one volume source, a dict with one key "
            f"of {', '.join(_VOLUME_KINDS)}, e.g. {example}."
        )
    if artifact_root is not None and not artifact_root.startswith("file://"):
        raise SettingsError(
            f"{owner}.artifact_volume is for a file:// artifact root on a shared volume, but "
            f"artifact_root={artifact_root!r}: drop artifact_volume (pods reach object stores "
            "through signed URLs)."
        )
    ((kind, source),) = value.items()
    if not isinstance(source, Mapping):
        raise SettingsError(f"{owner}.artifact_volume[{kind!r}] must be a dict, e.g. {example}.")
    return {kind: dict(source)}
