"""The azure_ml connection type: its form, its workspace and the credential it picks."""

from __future__ import annotations

import json

import pytest

from airflow_stepop.hooks.azureml import ARM, AzureMLHook

WORKSPACE = {"subscription_id": "sub-1", "resource_group": "rg", "workspace_name": "ws"}


@pytest.fixture
def connection(monkeypatch):
    def make(login=None, password=None, **extra):
        conn = {"conn_type": "azure_ml", "extra": {**WORKSPACE, **extra}}
        if login:
            conn["login"] = login
        if password:
            conn["password"] = password
        monkeypatch.setenv("AIRFLOW_CONN_AML_TEST", json.dumps(conn))
        return AzureMLHook(azureml_conn_id="aml_test")

    return make


def test_airflow_shows_the_form_of_the_azure_ml_connection_type():
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    fields = {
        name.removeprefix("extra__azure_ml__")
        for name in manager.connection_form_widgets
        if name.startswith("extra__azure_ml__")
    }
    assert fields == {
        "subscription_id", "resource_group", "workspace_name", "tenant_id",
        "managed_identity_client_id", "workload_identity_tenant_id", "endpoint", "ca_bundle",
        "emulator_token",
    }  # fmt: skip
    behaviour = manager.field_behaviours["azure_ml"]
    assert behaviour["relabeling"] == {"login": "Client ID", "password": "Client Secret"}
    assert {"host", "port", "schema"} <= set(behaviour["hidden_fields"])


def test_fields_saved_by_the_form_are_read_like_plain_extras(monkeypatch):
    extra = {f"extra__azure_ml__{k}": v for k, v in WORKSPACE.items()}
    monkeypatch.setenv(
        "AIRFLOW_CONN_AML_FORM", json.dumps({"conn_type": "azure_ml", "extra": extra})
    )
    assert AzureMLHook(azureml_conn_id="aml_form").workspace.name == "ws"


def test_the_workspace_comes_from_the_extra(connection, tmp_path):
    ws = connection().workspace
    assert ws.path == (
        "/subscriptions/sub-1/resourceGroups/rg/providers/Microsoft.MachineLearningServices/"
        "workspaces/ws"
    )
    assert ws.arm_url == ARM and ws.scope == f"{ARM}/.default" and ws.verify is True
    pem = tmp_path / "ca.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\n")
    gov = connection(endpoint="https://management.usgovcloudapi.net/", ca_bundle=str(pem))
    assert gov.workspace.scope == "https://management.usgovcloudapi.net/.default"
    assert gov.workspace.verify == str(pem)


def test_a_missing_workspace_field_is_named(connection, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_AML_TEST", json.dumps({"conn_type": "azure_ml", "extra": {"x": 1}})
    )
    with pytest.raises(ValueError, match="has no subscription_id"):
        AzureMLHook(azureml_conn_id="aml_test").workspace  # noqa: B018


def test_a_client_secret_makes_a_service_principal_credential(connection):
    from azure.identity import ClientSecretCredential
    from azure.identity.aio import ClientSecretCredential as AsyncClientSecretCredential

    hook = connection(login="app-id", password="s3cret", tenant_id="tenant-1")
    assert hook.credential_kind == "client_secret"
    assert isinstance(hook.get_credential(), ClientSecretCredential)
    assert isinstance(hook.get_async_credential(), AsyncClientSecretCredential)
    with pytest.raises(ValueError, match="no tenant_id"):
        connection(login="app-id", password="s3cret").credential_kind  # noqa: B018


def test_without_a_secret_default_azure_credential_with_the_identity_ids(connection):
    from azure.identity import DefaultAzureCredential
    from azure.identity.aio import DefaultAzureCredential as AsyncDefaultAzureCredential

    hook = connection(managed_identity_client_id="mi-client", workload_identity_tenant_id="t")
    assert hook.credential_kind == "default"
    assert isinstance(hook.get_credential(), DefaultAzureCredential)
    assert isinstance(hook.get_async_credential(), AsyncDefaultAzureCredential)


# azure-identity reads these when it builds a credential; none may leak in from the machine.
_IDENTITY_ENV = (
    "AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_AUTHORITY_HOST", "IDENTITY_ENDPOINT", "IDENTITY_HEADER", "MSI_ENDPOINT", "MSI_SECRET",
    "IDENTITY_SERVER_THUMBPRINT", "IMDS_ENDPOINT", "AZURE_POD_IDENTITY_AUTHORITY_HOST",
    "AZURE_TOKEN_CREDENTIALS",
)  # fmt: skip


@pytest.fixture
def clean_identity_env(monkeypatch):
    for name in _IDENTITY_ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _managed_identity_client_id(credential):
    """The client id in the ManagedIdentityCredential azure-identity built inside a
    DefaultAzureCredential (IMDS, the source on a VM or a compute cluster)."""
    from azure.identity import ManagedIdentityCredential
    from azure.identity.aio import ManagedIdentityCredential as AsyncManagedIdentityCredential

    kinds = (ManagedIdentityCredential, AsyncManagedIdentityCredential)
    (managed,) = [c for c in credential.credentials if isinstance(c, kinds)]
    imds = managed._credential
    config = getattr(imds, "_settings", None) or imds._client._identity_config
    return config.get("client_id")


def test_a_user_assigned_identity_client_id_alone_is_used(connection, clean_identity_env):
    """managed_identity_client_id without workload_identity_tenant_id: the Azure provider's
    helper returned a plain DefaultAzureCredential, signing in as the system identity."""
    hook = connection(managed_identity_client_id="mi-client")
    assert _managed_identity_client_id(hook.get_credential()) == "mi-client"
    assert _managed_identity_client_id(hook.get_async_credential()) == "mi-client"
    assert _managed_identity_client_id(connection().get_credential()) is None  # system identity


def test_workload_identity_takes_the_client_and_tenant_ids(
    connection, clean_identity_env, tmp_path
):
    from azure.identity import WorkloadIdentityCredential

    token_file = tmp_path / "token"
    token_file.write_text("federated")
    clean_identity_env.setenv("AZURE_FEDERATED_TOKEN_FILE", str(token_file))
    hook = connection(managed_identity_client_id="mi-client", workload_identity_tenant_id="wt")
    credential = hook.get_credential()
    (workload,) = [c for c in credential.credentials if isinstance(c, WorkloadIdentityCredential)]
    assert (workload._client._client_id, workload._client._tenant_id) == ("mi-client", "wt")
    assert _managed_identity_client_id(credential) == "mi-client"


def test_the_emulator_token_is_only_for_an_endpoint_on_this_machine(connection):
    hook = connection(endpoint="https://127.0.0.1:8443", emulator_token=True)
    assert hook.credential_kind == "emulator"
    assert hook.get_credential().get_token(hook.workspace.scope).token == "emulator"
    # the container host, where docker compose's `emulated` profile runs the emulated clouds
    in_compose = connection(endpoint="https://host.docker.internal:4571", emulator_token=True)
    assert in_compose.credential_kind == "emulator"
    remote = connection(endpoint="https://management.azure.com", emulator_token=True)
    with pytest.raises(ValueError, match="neither on this machine nor its container host"):
        remote.get_credential()


@pytest.mark.parametrize(
    ("user_level", "expected"), [(None, "WARNING"), ("DEBUG", "DEBUG")], ids=["default", "user-set"]
)
def test_azure_request_headers_stay_out_of_a_steps_task_log(user_level, expected):
    """azure-core logs every blob call's URL and headers at INFO; a level a user set is kept."""
    import subprocess
    import sys

    from airflow_stepop.hooks.azureml_fs import REQUEST_LOGGER

    code = "import logging\nlogging.getLogger().setLevel(logging.INFO)  # as in a task process\n"
    if user_level:
        code += f"logging.getLogger({REQUEST_LOGGER!r}).setLevel(logging.{user_level})\n"
    code += (
        "import airflow_stepop.backends.azureml.backend\n"
        f"print(logging.getLevelName(logging.getLogger({REQUEST_LOGGER!r}).getEffectiveLevel()))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == expected


def test_each_cloud_is_the_one_azure_ai_ml_and_azure_identity_know():
    from azure.ai.ml._azure_environments import _get_cloud_details
    from azure.identity import AzureAuthorityHosts

    from airflow_stepop.hooks.azureml import CLOUDS

    authorities = {
        "AzureCloud": AzureAuthorityHosts.AZURE_PUBLIC_CLOUD,
        "AzureUSGovernment": AzureAuthorityHosts.AZURE_GOVERNMENT,
        "AzureChinaCloud": AzureAuthorityHosts.AZURE_CHINA,
    }
    assert {c.name for c in CLOUDS.values()} == set(authorities)
    for host, cloud in CLOUDS.items():
        details = _get_cloud_details(cloud.name)
        assert details["resource_manager"] == f"https://{host}/"
        assert details["storage_endpoint"] == cloud.storage_suffix
        assert details["aml_resource_id"] == cloud.studio + "/"
        assert details["active_directory"] == f"https://{cloud.authority}/"
        assert cloud.authority == authorities[cloud.name]


def test_a_sovereign_endpoint_signs_in_and_stores_in_its_own_cloud(connection, clean_identity_env):
    gov = connection(endpoint="https://management.usgovcloudapi.net", tenant_id="t",
                     login="app", password="s3cret")  # fmt: skip
    ws = gov.workspace
    assert not ws.emulated
    assert ws.cloud.name == "AzureUSGovernment"
    assert ws.cloud.storage_suffix == "core.usgovcloudapi.net"
    assert gov.get_credential()._authority == "https://login.microsoftonline.us"
    assert gov.get_async_credential()._client._authority == "https://login.microsoftonline.us"
    # without a secret: the environment's service principal signs in there too
    for name, value in {"AZURE_TENANT_ID": "t", "AZURE_CLIENT_ID": "app",
                        "AZURE_CLIENT_SECRET": "s3cret"}.items():  # fmt: skip
        clean_identity_env.setenv(name, value)
    china = connection(endpoint="https://management.chinacloudapi.cn/")
    (environment, *_) = china.get_credential().credentials
    assert environment._credential._authority == "https://login.chinacloudapi.cn"
    # an authority_host extra still wins
    own = connection(endpoint="https://management.usgovcloudapi.net", tenant_id="t",
                     authority_host="login.example", login="app", password="s3cret")  # fmt: skip
    assert own.get_credential()._authority == "https://login.example"


def test_the_ml_client_of_a_sovereign_workspace_is_in_that_cloud(connection):
    from azure.identity import ClientSecretCredential

    hook = connection(endpoint="https://management.chinacloudapi.cn", tenant_id="t",
                      login="app", password="s3cret")  # fmt: skip
    ml = hook.get_conn()
    assert ml._cloud == "AzureChinaCloud"
    assert ml._base_url == "https://management.chinacloudapi.cn"
    assert isinstance(ml._credential, ClientSecretCredential)


def test_an_endpoint_of_no_known_cloud_is_refused_not_taken_for_an_emulator(connection):
    hook = connection(endpoint="https://arm.example.com")
    with pytest.raises(ValueError, match=r"endpoint='https://arm\.example\.com'.*management\.us"):
        hook.workspace  # noqa: B018
    assert connection(endpoint="https://localhost:8443").workspace.emulated
    assert connection(endpoint="https://host.docker.internal:4571").workspace.emulated
    assert not connection().workspace.emulated


def test_a_hook_reads_its_connection_once_and_tells_the_supervisor_few_secrets(
    connection, monkeypatch
):
    """Each secret mask reaches the supervisor as a message; a triggerer's supervisor wakes for
    each. A hook makes one connection read (its extra masked) and parses the extra once."""
    from airflow.sdk.bases.hook import BaseHook
    from airflow.sdk.execution_time import task_runner
    from airflow.sdk.execution_time.comms import MaskSecret

    class Supervisor:
        def __init__(self) -> None:
            self.sent: list[object] = []

        def send(self, msg: object) -> None:
            self.sent.append(msg)

    supervisor = Supervisor()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", supervisor, raising=False)
    hook = connection(endpoint="http://127.0.0.1:9", emulator_token="true")

    def masks() -> int:
        return sum(isinstance(m, MaskSecret) for m in supervisor.sent)

    BaseHook.get_connection("aml_test").extra_dejson  # noqa: B018 - one read, one parse
    one_read = masks()
    hook.workspace, hook.credential_kind, hook.get_async_credential(), hook.get_credential()

    assert one_read > 0
    assert masks() - one_read == one_read


def test_a_ca_bundle_that_is_not_a_file_is_named(connection, tmp_path):
    pem = tmp_path / "proxy-ca.pem"
    with pytest.raises(ValueError, match=r"has ca_bundle='.*proxy-ca.pem', which is not a file"):
        _ = connection(ca_bundle=str(pem)).workspace
    pem.write_text("-----BEGIN CERTIFICATE-----\n")
    assert connection(ca_bundle=str(pem)).workspace.verify == str(pem)
