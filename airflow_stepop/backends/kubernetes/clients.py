"""API clients of one Airflow connection (the cncf.kubernetes provider's ``kubernetes`` type).

The connection is read as the provider's ``KubernetesHook`` reads it (extras ``in_cluster``,
``kube_config_path``, ``kube_config`` inline, ``cluster_context``, ``namespace``,
``disable_verify_ssl``; the old ``extra__kubernetes__`` prefix too; no connection: in-cluster,
else ``~/.kube/config``), but every client gets a configuration object of its own: the hook's
loaders write the process-wide default configuration, so two connections in one triggerer (or
one worker) would use whichever was loaded last.
"""

from __future__ import annotations

import json
import os
from typing import Any, NamedTuple

from airflow_stepop.setting_values import SettingsError

IN_CLUSTER_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


class ClusterAccess(NamedTuple):
    """How to reach the cluster, as the connection says: one of the loaders' arguments."""

    in_cluster: bool
    config_file: str | None
    config_dict: dict[str, Any] | None
    context: str | None
    namespace: str | None
    verify_ssl: bool


def _flag(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("true", "1", "yes", "on")


def read_access(conn_id: str | None) -> ClusterAccess:
    """The connection's way to the cluster; a connection that does not exist means the default
    one (in-cluster where the pod has a service account token, else the kubeconfig file)."""
    extras: dict[str, Any] = {}
    if conn_id:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        extras = KubernetesHook.get_connection(conn_id).extra_dejson or {}

    def field(name: str) -> Any:
        return extras.get(name) or extras.get(f"extra__kubernetes__{name}") or None

    inline = field("kube_config")
    if isinstance(inline, str):
        try:
            inline = json.loads(inline)
        except ValueError:
            import yaml  # a kubeconfig pasted as YAML, as the provider takes it

            inline = yaml.safe_load(inline)
    chosen = [n for n in ("kube_config_path", "kube_config") if field(n)]
    if _flag(field("in_cluster")):  # "false" is a string: set, and not chosen
        chosen.insert(0, "in_cluster")
    if len(chosen) > 1:
        raise SettingsError(
            f"The Kubernetes connection {conn_id!r} sets {' and '.join(chosen)}: they are "
            "different ways to the cluster; keep one."
        )
    in_cluster = _flag(field("in_cluster")) or (
        not chosen and os.path.exists(IN_CLUSTER_TOKEN) and "KUBERNETES_SERVICE_HOST" in os.environ
    )
    return ClusterAccess(
        in_cluster=in_cluster,
        config_file=field("kube_config_path"),
        config_dict=inline if isinstance(inline, dict) else None,
        context=field("cluster_context"),
        namespace=field("namespace"),
        verify_ssl=not _flag(field("disable_verify_ssl")),
    )


def sync_client(access: ClusterAccess) -> Any:
    """A ``kubernetes.client.ApiClient`` on a configuration of its own."""
    from kubernetes import client, config

    configuration = client.Configuration()
    if access.in_cluster:
        config.load_incluster_config(client_configuration=configuration)
    elif access.config_dict is not None:
        config.load_kube_config_from_dict(
            access.config_dict, context=access.context, client_configuration=configuration,
            persist_config=False,
        )  # fmt: skip
    else:
        config.load_kube_config(
            config_file=access.config_file, context=access.context,
            client_configuration=configuration, persist_config=False,
        )  # fmt: skip
    if not access.verify_ssl:
        configuration.verify_ssl = False
    return client.ApiClient(configuration)


async def async_client(access: ClusterAccess) -> Any:
    """A ``kubernetes_asyncio.client.ApiClient`` on a configuration of its own."""
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    if access.in_cluster:
        config.load_incluster_config(client_configuration=configuration)
    elif access.config_dict is not None:
        await config.load_kube_config_from_dict(
            access.config_dict, context=access.context, client_configuration=configuration
        )
    else:
        await config.load_kube_config(
            config_file=access.config_file, context=access.context,
            client_configuration=configuration, persist_config=False,
        )  # fmt: skip
    if not access.verify_ssl:
        configuration.verify_ssl = False
    return client.ApiClient(configuration)
