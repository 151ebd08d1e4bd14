"""Artifact roots of Azure ML steps: Blob Storage URLs and Azure ML datastore paths.

A root is one of

* ``abfs://<container>/<path>`` (also ``abfss://``) or ``az://<container>/<path>``: adlfs's
  schemes for Blob Storage / ADLS Gen2. The worker writes there through ObjectStoragePath with
  the credentials adlfs finds (or those of an Airflow connection written as
  ``abfs://<conn_id>@<container>/<path>``, Airflow's own URL form); ``az://`` is served by the
  same filesystem (``hooks/azureml_fs.py``);
* ``azureml://datastores/<name>/paths/<path>``, or the long form
  ``azureml://subscriptions/<s>/resourcegroups/<rg>/workspaces/<ws>/datastores/<name>/paths/
  <path>``: a datastore of the connection's workspace. The backend reads the datastore (one GET,
  kept for the process) and the worker writes ``abfs://<container>/<path>`` in its storage
  account, while the job's inputs and outputs name the same data as datastore paths.

Checked at DAG parse time (``check_root``); a refusal names the field, the value and an
example of each form.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

from airflow_stepop.backends.azureml.errors import AzureMLConfigError
from airflow_stepop.setting_values import SettingsError

EXAMPLES = (
    "'abfs://mycontainer/stepop', 'az://mycontainer/stepop' or "
    "'azureml://datastores/workspaceblobstore/paths/stepop'"
)
_BLOB = r"^(?P<scheme>abfss?|az)://(?:(?P<conn>[^/@]+)@)?(?P<host>[^/@]+)(?P<path>/.*)?$"
_CONTAINER = r"^(?:[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}|\$root)$"
_DATASTORE = (
    r"(?i)^azureml://(?:subscriptions/(?P<sub>[^/]+)/resourcegroups/(?P<rg>[^/]+)/"
    r"(?:providers/Microsoft\.MachineLearningServices/)?workspaces/(?P<ws>[^/]+)/)?"
    r"datastores/(?P<name>[^/]+)/paths(?:/(?P<path>.*))?$"
)
_DATASTORE_NAME = r"^[A-Za-z0-9_]{1,255}$"
BLOB_TYPES = {"AzureBlob": "containerName", "AzureDataLakeGen2": "filesystem"}


@dataclass(frozen=True)
class DatastorePath:
    """``azureml://[.../workspaces/<ws>/]datastores/<name>/paths/<path>``, parsed."""

    name: str
    path: str
    workspace: tuple[str, str, str] | None = None  # (subscription, resource group, name)

    @property
    def job_uri(self) -> str:
        """The short form, which Azure ML resolves in the job's own workspace."""
        return f"azureml://datastores/{self.name}/paths/{self.path}".rstrip("/")


@dataclass(frozen=True)
class Datastore:
    """Where a datastore keeps its data (from the workspace's datastore resource)."""

    name: str
    account: str
    container: str


def parse_datastore(value: str) -> DatastorePath | None:
    m = re.match(_DATASTORE, value)
    if m is None:
        return None
    workspace = (m["sub"], m["rg"], m["ws"]) if m["ws"] else None
    return DatastorePath(m["name"], (m["path"] or "").strip("/"), workspace)


def check_root(owner: str, value: Any, field: str = "artifact_root") -> None:
    """Refuse what the worker or the job could not use, before any API call."""
    if value is None:
        return
    # the operator's argument, or the [stepop] option it fell back to
    shown = (
        f"{owner}: {field} = {value!r}" if field.startswith("[") else f"{owner}.{field}={value!r}"
    )
    forms = (
        "use abfs://<container>/<path>, az://<container>/<path> or a datastore path "
        f"azureml://datastores/<name>/paths/<path>, e.g. {EXAMPLES}."
    )
    if field == "[stepop] artifact_root":  # shared with the other backends' steps
        forms += (
            " Or set [stepop] azureml_artifact_root to one: Azure ML steps read it before "
            "[stepop] artifact_root, which the other steps keep."
        )
    if not isinstance(value, str):
        raise SettingsError(f"{shown} is not a URL; {forms}")
    if value.lower().startswith("azureml://"):
        found = parse_datastore(value)
        if found is None or not re.match(_DATASTORE_NAME, found.name):
            raise SettingsError(
                f"{shown} is not a datastore path; write azureml://datastores/<name>/paths/<path> "
                "(or the long form azureml://subscriptions/<id>/resourcegroups/<group>/"
                "workspaces/<workspace>/datastores/<name>/paths/<path>), e.g. "
                "'azureml://datastores/workspaceblobstore/paths/stepop'."
            )
        return
    m = re.match(_BLOB, value)
    if m is None:
        raise SettingsError(f"{shown} is not an Azure artifact root; {forms}")
    if "." in m["host"]:
        raise SettingsError(
            f"{shown} names the storage account in the URL, but Airflow's ObjectStoragePath reads "
            f"'{m['conn'] or m['host']}@' as a connection id. Write "
            f"'{m['scheme']}://<container>/<path>' (the account comes from the storage "
            "credentials, e.g. AZURE_STORAGE_ACCOUNT_NAME), or the workspace's datastore, e.g. "
            "'azureml://datastores/workspaceblobstore/paths/stepop'."
        )
    if not re.match(_CONTAINER, m["host"]):
        raise SettingsError(
            f"{shown}: {m['host']!r} is not a Blob Storage container name (3-63 lowercase "
            f"letters, digits and single hyphens); {forms}"
        )


class DatastoreCache:
    """Datastores already read by this process: (workspace path, name) -> Datastore."""

    def __init__(self) -> None:
        self._found: dict[tuple[str, str], Datastore] = {}
        self._lock = threading.Lock()

    def get(self, arm: Any, workspace_path: str, name: str) -> Datastore:
        key = (workspace_path.lower(), name.lower())
        with self._lock:
            if key in self._found:
                return self._found[key]
        found = read_datastore(arm, workspace_path, name)
        with self._lock:
            self._found[key] = found
        return found


DATASTORES = DatastoreCache()


def read_datastore(arm: Any, workspace_path: str, name: str) -> Datastore:
    """One ``GET .../datastores/<name>`` (what ``MLClient.datastores.get`` calls)."""
    from azure.core.exceptions import ResourceNotFoundError

    try:
        props = arm.get(f"{workspace_path}/datastores/{name}").get("properties") or {}
    except ResourceNotFoundError as exc:
        raise AzureMLConfigError(
            f"The artifact root names the datastore {name!r}, which the workspace does not have; "
            "use one of its datastores (the default is 'workspaceblobstore'), e.g. "
            "'azureml://datastores/workspaceblobstore/paths/stepop'."
        ) from exc
    kind = props.get("datastoreType")
    field = BLOB_TYPES.get(str(kind))
    if field is None or not props.get(field) or not props.get("accountName"):
        raise AzureMLConfigError(
            f"The artifact root names the datastore {name!r} of type {kind}; artifacts need a "
            "Blob Storage (AzureBlob) or ADLS Gen2 (AzureDataLakeGen2) datastore, e.g. "
            "'azureml://datastores/workspaceblobstore/paths/stepop'."
        )
    return Datastore(name=name, account=str(props["accountName"]), container=str(props[field]))


def resolve_datastore(found: DatastorePath, ws: Any, arm: Any, conn_id: str) -> Datastore:
    """The datastore of the connection's workspace ``ws`` (read once per process)."""
    if found.workspace is not None:
        named = tuple(part.lower() for part in found.workspace)
        if named != (ws.subscription_id.lower(), ws.resource_group.lower(), ws.name.lower()):
            raise AzureMLConfigError(
                f"The artifact root names workspace {'/'.join(found.workspace)}, but connection "
                f"{conn_id!r} is workspace {ws.subscription_id}/{ws.resource_group}/{ws.name}; "
                f"use a datastore of that workspace, e.g. "
                f"'azureml://datastores/{found.name}/paths/{found.path or 'stepop'}'."
            )
    return DATASTORES.get(arm, ws.path, found.name)


def check_account(store: Datastore, worker_account: str | None) -> None:
    """The worker must reach the datastore's storage account (None: it cannot tell)."""
    if worker_account and worker_account.lower() != store.account.lower():
        raise AzureMLConfigError(
            f"Datastore {store.name!r} keeps its data in storage account {store.account!r}, but "
            f"the worker's Azure Storage credentials reach {worker_account!r}; give the worker "
            f"credentials for {store.account!r} (e.g. AZURE_STORAGE_ACCOUNT_NAME and a key, or "
            "DefaultAzureCredential with Storage Blob Data Contributor on it)."
        )


def storage_account(storage: Any, uri: str) -> str | None:
    """The storage account of an ``abfs://``/``az://`` URI, from the worker's filesystem."""
    try:
        fs, _ = storage.resolver(uri)
        return getattr(fs, "account_name", None) or fs.service_client.account_name
    except Exception:
        return None
