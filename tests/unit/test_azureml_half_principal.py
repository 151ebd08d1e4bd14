"""An azure_ml connection with a client id and no secret (or a secret and no client id) is
refused: before, it silently fell back to DefaultAzureCredential, so the step ran as whatever
identity the worker or triggerer had (its managed identity, an Azure CLI login), not as the
service principal the connection names.
"""

from __future__ import annotations

import pytest

from tests.unit.test_azureml_hook import clean_identity_env, connection  # noqa: F401 - fixtures


@pytest.mark.parametrize(
    ("login", "password", "said", "fix"),
    [
        ("app-id", None, "a Client ID (login='app-id') but its Client Secret (password) is ''",
         "Set the service principal's secret in the password field"),
        (None, "s3cret", "a Client Secret (password) but its Client ID (login) is ''",
         "Set the service principal's application (client) id in the login field"),
    ],
)  # fmt: skip
def test_half_a_service_principal_is_refused_naming_the_empty_field_and_the_fix(
    connection,  # noqa: F811
    clean_identity_env,  # noqa: F811
    login,
    password,
    said,
    fix,
):
    hook = connection(login=login, password=password, tenant_id="tenant-1")
    for build in (hook.get_credential, hook.get_async_credential):
        with pytest.raises(ValueError) as refused:
            build()
        message = str(refused.value)
        assert "Connection 'aml_test' has " + said in message
        assert fix in message and "managed_identity_client_id" in message
        assert "s3cret" not in message  # the secret is never shown


@pytest.mark.parametrize(
    "identity",
    [{"managed_identity_client_id": "mi-client"}, {"workload_identity_tenant_id": "wt"}],
)
def test_a_client_id_with_an_identity_asked_for_explicitly_uses_default_azure_credential(
    connection,  # noqa: F811
    clean_identity_env,  # noqa: F811
    identity,
):
    from azure.identity import DefaultAzureCredential

    hook = connection(login="app-id", **identity)
    assert hook.credential_kind == "default"
    assert isinstance(hook.get_credential(), DefaultAzureCredential)


def test_neither_a_client_id_nor_a_secret_is_the_machine_s_own_identity(
    connection,  # noqa: F811
    clean_identity_env,  # noqa: F811
):
    assert connection().credential_kind == "default"
