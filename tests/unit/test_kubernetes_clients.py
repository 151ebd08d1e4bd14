"""The Kubernetes connection read as the provider reads it, each client on its own config."""

from __future__ import annotations

import asyncio
import json

import pytest

from airflow_stepop.backends.kubernetes.clients import async_client, read_access, sync_client
from airflow_stepop.settings import SettingsError


def kubeconfig(server: str, token: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }


def connect(monkeypatch, conn_id: str, **extra) -> None:
    connection = {"conn_type": "kubernetes", "extra": extra}
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))


def test_two_connections_in_one_process_keep_their_own_clusters(monkeypatch):
    from kubernetes import client

    default_host = client.Configuration.get_default_copy().host
    connect(monkeypatch, "cluster_a", kube_config=kubeconfig("http://10.0.0.1:6443", "token-a"),
            namespace="team-a")  # fmt: skip
    connect(
        monkeypatch, "cluster_b", kube_config=json.dumps(kubeconfig("http://10.0.0.2:6443", "b"))
    )
    a, b = read_access("cluster_a"), read_access("cluster_b")
    assert a.namespace == "team-a" and b.namespace is None
    api_a, api_b = sync_client(a), sync_client(b)
    assert api_a.configuration.host == "http://10.0.0.1:6443"
    assert api_b.configuration.host == "http://10.0.0.2:6443"
    assert api_a.configuration.auth_settings()["BearerToken"]["value"] == "Bearer token-a"
    assert client.Configuration.get_default_copy().host == default_host  # nothing global changed

    async def hosts() -> list[str]:
        clients = [await async_client(access) for access in (a, b)]
        try:
            return [c.configuration.host for c in clients]
        finally:
            for c in clients:
                await c.close()

    assert asyncio.run(hosts()) == ["http://10.0.0.1:6443", "http://10.0.0.2:6443"]


def test_the_providers_old_prefixed_extras_and_a_kubeconfig_file_are_read(monkeypatch, tmp_path):
    path = tmp_path / "config"
    path.write_text(json.dumps(kubeconfig("http://10.0.0.3:6443", "t")))
    prefixed = {"kube_config_path": str(path), "disable_verify_ssl": "true"}
    connect(monkeypatch, "old_style", **{f"extra__kubernetes__{k}": v for k, v in prefixed.items()})
    access = read_access("old_style")
    assert access.config_file == str(path) and access.verify_ssl is False
    assert sync_client(access).configuration.host == "http://10.0.0.3:6443"


def test_a_connection_with_two_ways_to_the_cluster_is_refused(monkeypatch, tmp_path):
    connect(monkeypatch, "both", in_cluster=True, kube_config_path=str(tmp_path / "c"))
    with pytest.raises(SettingsError, match="in_cluster and kube_config_path"):
        read_access("both")


def test_throttling_5xx_and_lost_connections_are_transient_on_either_client():
    import aiohttp
    import urllib3
    from kubernetes.client.exceptions import ApiException

    from airflow_stepop.backends.kubernetes.backend import KubernetesBackend
    from airflow_stepop.backends.kubernetes.triggerer_calls import ApiError

    backend = KubernetesBackend(job=None)
    lost = urllib3.exceptions.MaxRetryError(None, "/")
    for transient in (ApiException(status=429), ApiException(status=503), ApiError(500, "x"),
                      lost, aiohttp.ClientError()):  # fmt: skip
        assert backend.is_transient(transient), transient
    for lasting in (ApiException(status=403), ApiException(status=404), ApiError(422, "x"),
                    ValueError("bad json")):  # fmt: skip
        assert not backend.is_transient(lasting), lasting
