"""The ``azure_ml`` connection form, declared as Airflow 3.2+ reads it from provider info.

``conn-fields`` (JSON schema per extra field) and ``ui-field-behaviour`` replace the hook's
deprecated ``get_connection_form_widgets``/``get_ui_field_behaviour``; plain data, so
``get_provider_info`` stays import-light.
"""

from __future__ import annotations

from typing import Any


def _text(label: str, description: str) -> dict[str, Any]:
    return {"label": label, "schema": {"type": ["string", "null"]}, "description": description}


CONN_FIELDS: dict[str, dict[str, Any]] = {
    "subscription_id": _text("Subscription ID", "The Azure subscription of the workspace."),
    "resource_group": _text("Resource Group", "The resource group of the workspace."),
    "workspace_name": _text("Workspace Name", "The Azure Machine Learning workspace."),
    "tenant_id": _text("Tenant ID", "The directory (tenant) id; needed with a client secret."),
    "managed_identity_client_id": _text(
        "Managed Identity Client ID",
        "A user-assigned managed identity's client id (no secret: DefaultAzureCredential).",
    ),
    "workload_identity_tenant_id": _text(
        "Workload Identity Tenant ID", "The tenant of a workload identity federation."
    ),
    "endpoint": _text(
        "Resource Manager Endpoint",
        "Overrides https://management.azure.com (sovereign clouds, the emulated cloud).",
    ),
    "ca_bundle": _text("CA Bundle", "A PEM file the endpoint's certificate is checked against."),
    "emulator_token": {
        "label": "Emulated cloud on this machine",
        "schema": {"type": ["boolean", "null"]},
        "description": "Send a placeholder token (only to an endpoint on 127.0.0.1/localhost).",
    },
}

UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["schema", "port", "host"],
    "relabeling": {"login": "Client ID", "password": "Client Secret"},
    "placeholders": {
        "login": "service principal's application (client) id, with its secret; or empty",
        "password": "client secret; empty with an empty client id: DefaultAzureCredential",
        "subscription_id": "00000000-0000-0000-0000-000000000000",
        "resource_group": "my-resource-group",
        "workspace_name": "my-workspace",
        "endpoint": "https://management.usgovcloudapi.net (empty: public Azure)",
    },
}
