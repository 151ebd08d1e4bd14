"""The ``azure_ml`` connection type: one Azure ML workspace and how to authenticate to it.

Fields (extras unless said otherwise): ``subscription_id``, ``resource_group``,
``workspace_name``, ``tenant_id``; the client id and secret of a service principal in the
Login and Password fields; without either, azure-identity's ``DefaultAzureCredential``
(environment, workload identity, managed identity, Azure CLI) with
``managed_identity_client_id`` (a user-assigned identity; also workload identity's client id)
and ``workload_identity_tenant_id``. Only one of the client id and the secret is refused (the
step would run as whatever identity the worker has, not the service principal named), unless
an identity extra asks for ``DefaultAzureCredential`` explicitly. ``endpoint`` is the Azure
Resource Manager URL of the workspace's cloud: empty (public Azure), Azure Government's or
Azure China's (the sign-in host, storage suffix and studio then follow that cloud, as in
azure-ai-ml), or an emulated cloud on this machine; ``authority_host`` overrides the sign-in
host. ``ca_bundle`` holds the CA certificates the endpoint is checked against.
``emulator_token`` (true) sends a fixed placeholder token instead of a credential: accepted
only for an emulated cloud's endpoint.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

from airflow.sdk.bases.hook import BaseHook

ARM = "https://management.azure.com"
# Where an emulated cloud may answer: this machine, or the container host as seen from a
# container (docker compose's `host.docker.internal`, e.g. the `emulated` profile's stack).
EMULATOR_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "host.docker.internal"})
_TRUE = ("true", "1", "yes", "on")


@dataclass(frozen=True)
class Cloud:
    """An Azure cloud Azure ML runs in, as azure-ai-ml knows it (``MLClient(cloud=name)``;
    ``azure.ai.ml._azure_environments``) with azure-identity's sign-in host
    (``AzureAuthorityHosts``). A copy, to spare the triggerer azure-ai-ml's import; the unit
    tests check it against both packages."""

    name: str
    authority: str  # the Microsoft Entra sign-in host
    storage_suffix: str  # <account>.blob.<suffix>
    studio: str  # Azure ML studio


# By the host of their Resource Manager endpoint.
CLOUDS = {
    "management.azure.com": Cloud(
        "AzureCloud", "login.microsoftonline.com", "core.windows.net", "https://ml.azure.com"
    ),
    "management.usgovcloudapi.net": Cloud(
        "AzureUSGovernment",
        "login.microsoftonline.us",
        "core.usgovcloudapi.net",
        "https://ml.azure.us",
    ),
    "management.chinacloudapi.cn": Cloud(
        "AzureChinaCloud", "login.chinacloudapi.cn", "core.chinacloudapi.cn", "https://ml.azure.cn"
    ),
}
PUBLIC = CLOUDS["management.azure.com"]


@dataclass(frozen=True)
class Workspace:
    """Where the workspace lives and how to reach its REST API (no secrets)."""

    subscription_id: str
    resource_group: str
    name: str
    arm_url: str
    verify: str | bool
    tenant_id: str | None = None

    @property
    def path(self) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.MachineLearningServices/workspaces/{self.name}"
        )

    @property
    def scope(self) -> str:
        return self.arm_url.rstrip("/") + "/.default"

    @property
    def emulated(self) -> bool:
        """An emulated cloud on this machine or its container host (never a remote host)."""
        return urlsplit(self.arm_url).hostname in EMULATOR_HOSTS

    @property
    def cloud(self) -> Cloud:
        """The endpoint's cloud (an emulated cloud behaves as public Azure)."""
        return CLOUDS.get(urlsplit(self.arm_url).hostname or "", PUBLIC)


class _EmulatorToken:
    """A placeholder bearer token for an emulated Azure ML on this machine (checks none)."""

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        return AccessToken("emulator", int(time.time()) + 3600)

    def get_token_info(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessTokenInfo

        return AccessTokenInfo("emulator", int(time.time()) + 3600)


class _AsyncEmulatorToken(_EmulatorToken):
    async def get_token(self, *scopes: str, **kwargs: Any) -> Any:  # type: ignore[override]
        return super().get_token(*scopes)

    async def get_token_info(self, *scopes: str, **kwargs: Any) -> Any:  # type: ignore[override]
        return super().get_token_info(*scopes)

    async def close(self) -> None:
        return None

    async def __aenter__(self) -> _AsyncEmulatorToken:
        return self

    async def __aexit__(self, *args: Any) -> None:
        return None


class AzureMLHook(BaseHook):
    """Credentials and workspace coordinates of an ``azure_ml`` connection.

    Its form is declared in ``azureml_form`` (``conn-fields`` of ``get_provider_info``).
    """

    conn_name_attr = "azureml_conn_id"
    default_conn_name = "azureml_default"
    conn_type = "azure_ml"
    hook_name = "Azure Machine Learning"

    def __init__(self, azureml_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.azureml_conn_id = azureml_conn_id

    @cached_property
    def _connection(self) -> Any:
        return self.get_connection(self.azureml_conn_id)

    @cached_property
    def _extras(self) -> dict[str, Any]:
        # Parsed once: each ``extra_dejson`` sends the supervisor a MaskSecret message, which
        # in a triggerer wakes its main loop (about ten a trigger before this cache).
        return self._connection.extra_dejson

    def _extra(self, name: str) -> Any:
        extras = self._extras
        value = extras.get(name)
        if value in (None, ""):
            value = extras.get(f"extra__azure_ml__{name}")  # older form-saved connections
        return None if value in (None, "") else value

    def _required(self, name: str) -> str:
        value = self._extra(name)
        if not value:
            raise ValueError(
                f"Connection {self.azureml_conn_id!r} has no {name}: set it in the connection's "
                f'extra (e.g. {{"{name}": "..."}}); see docs/azureml.md, The connection.'
            )
        return str(value)

    @cached_property
    def workspace(self) -> Workspace:
        endpoint = self._extra("endpoint")
        arm_url = str(endpoint).rstrip("/") if endpoint else ARM
        host = urlsplit(arm_url).hostname
        if host not in CLOUDS and host not in EMULATOR_HOSTS:
            known = ", ".join(f"https://{h}" for h in CLOUDS)
            raise ValueError(
                f"Connection {self.azureml_conn_id!r} has endpoint={endpoint!r}, which is neither "
                f"the Resource Manager of a cloud Azure ML runs in ({known}) nor an emulated "
                "cloud on this machine (127.0.0.1, localhost, host.docker.internal); set one of "
                "those, or leave endpoint empty for public Azure."
            )
        verify: str | bool = self._extra("ca_bundle") or True
        if isinstance(verify, str) and not os.path.isfile(verify):
            raise ValueError(
                f"Connection {self.azureml_conn_id!r} has ca_bundle={verify!r}, which is not a "
                "file on this machine (each request would fail with a bare SSL error). Give the "
                "path of a PEM file every Airflow worker and triggerer has, or leave ca_bundle "
                "empty to use the system's certificates."
            )
        return Workspace(
            subscription_id=self._required("subscription_id"),
            resource_group=self._required("resource_group"),
            name=self._required("workspace_name"),
            arm_url=arm_url,
            verify=verify,
            tenant_id=self._extra("tenant_id"),
        )

    @property
    def credential_kind(self) -> str:
        """'emulator', 'client_secret' or 'default' (DefaultAzureCredential)."""
        if str(self._extra("emulator_token") or "").lower() in _TRUE:
            host = urlsplit(str(self._extra("endpoint") or "")).hostname
            if host not in EMULATOR_HOSTS:
                raise ValueError(
                    f"Connection {self.azureml_conn_id!r} sets emulator_token, but its endpoint "
                    f"{self._extra('endpoint')!r} is neither on this machine nor its container "
                    "host; remove emulator_token and give a client secret or use a managed "
                    "identity."
                )
            return "emulator"
        login, password = self._connection.login or "", self._connection.password or ""
        if login and password:
            if not self.workspace.tenant_id:
                raise ValueError(
                    f"Connection {self.azureml_conn_id!r} has a client id and secret but no "
                    "tenant_id; add the directory (tenant) id to its extra."
                )
            return "client_secret"
        if (login or password) and not self._asks_for_an_identity():
            self._refuse_half_a_service_principal(login, password)
        return "default"

    def _asks_for_an_identity(self) -> bool:
        """Whether an extra asks for a managed or workload identity by name (the azure
        provider's fields): then a client id without a secret is not a half-set principal."""
        return bool(
            self._extra("managed_identity_client_id") or self._extra("workload_identity_tenant_id")
        )

    def _refuse_half_a_service_principal(self, login: str, password: str) -> None:
        """A client id without its secret (or a secret without its id): DefaultAzureCredential
        would sign in as whatever identity the machine has, silently not the one named."""
        if login:
            said = f"a Client ID (login={login!r}) but its Client Secret (password) is ''"
            fix = "Set the service principal's secret in the password field"
        else:
            said = "a Client Secret (password) but its Client ID (login) is ''"
            fix = "Set the service principal's application (client) id in the login field"
        raise ValueError(
            f"Connection {self.azureml_conn_id!r} has {said}: without both, the step would run "
            "as whatever identity the worker or triggerer has (DefaultAzureCredential), not as "
            f"that service principal. {fix}; or, to use a managed or workload identity, empty "
            "both and set managed_identity_client_id (a user-assigned identity) or "
            "workload_identity_tenant_id in the extra, or empty both for the machine's own "
            "identity."
        )

    def _default_kwargs(self) -> dict[str, Any]:
        """``DefaultAzureCredential``'s keywords: the identity ids, the cloud's sign-in host.

        A user-assigned managed identity's client id is used alone as well (the Azure
        provider's helper drops it without a workload identity tenant id); with a tenant id,
        as that helper does, workload identity may also sign in to that tenant."""
        kwargs: dict[str, Any] = self._authority()
        client_id = self._extra("managed_identity_client_id")
        tenant_id = self._extra("workload_identity_tenant_id")
        if client_id:
            kwargs["managed_identity_client_id"] = str(client_id)
        if tenant_id:
            kwargs["workload_identity_tenant_id"] = str(tenant_id)
            kwargs["additionally_allowed_tenants"] = [str(tenant_id)]
        return kwargs

    def _authority(self) -> dict[str, str]:
        """The ``authority_host`` extra, else the endpoint's cloud's sign-in host."""
        authority = self._extra("authority_host") or self.workspace.cloud.authority
        return {"authority": str(authority)}

    def get_credential(self) -> Any:
        """A synchronous token credential for the worker."""
        kind = self.credential_kind
        if kind == "emulator":
            return _EmulatorToken()
        if kind == "client_secret":
            from azure.identity import ClientSecretCredential

            conn = self._connection
            return ClientSecretCredential(
                self.workspace.tenant_id, conn.login, conn.password, **self._authority()
            )
        from azure.identity import DefaultAzureCredential

        return DefaultAzureCredential(**self._default_kwargs())

    def get_async_credential(self) -> Any:
        """An ``azure.identity.aio`` credential for the triggerer (close it after use)."""
        kind = self.credential_kind
        if kind == "emulator":
            return _AsyncEmulatorToken()
        if kind == "client_secret":
            from azure.identity.aio import ClientSecretCredential

            conn = self._connection
            return ClientSecretCredential(
                self.workspace.tenant_id, conn.login, conn.password, **self._authority()
            )
        from azure.identity.aio import DefaultAzureCredential

        return DefaultAzureCredential(**self._default_kwargs())

    def get_conn(self) -> Any:
        """An ``azure.ai.ml.MLClient`` on the workspace, in the endpoint's cloud."""
        from azure.ai.ml import MLClient

        ws = self.workspace
        kwargs: dict[str, Any] = {}
        if ws.cloud is not PUBLIC:
            kwargs["cloud"] = ws.cloud.name
        elif ws.emulated:
            base = ws.arm_url + "/"
            kwargs["cloud"] = "StepopEndpointOverride"
            kwargs["cloud_metadata"] = {
                "azure_portal": base,
                "resource_manager": base,
                "active_directory": base,
                "aml_resource_id": base,
                "storage_endpoint": "core.windows.net",
                "registry_discovery_endpoint": base,
            }
        if ws.verify is not True:
            kwargs["connection_verify"] = ws.verify
        return MLClient(
            self.get_credential(), ws.subscription_id, ws.resource_group, ws.name, **kwargs
        )

    def test_connection(self) -> tuple[bool, str]:
        """Reads the workspace (the form's Test button)."""
        try:
            from airflow_stepop.hooks.azureml_rest import ArmClient

            answer = ArmClient(self).get(self.workspace.path)
            return True, f"Workspace {answer.get('name')} in {answer.get('location')} answers."
        except Exception as exc:
            return False, str(exc)
