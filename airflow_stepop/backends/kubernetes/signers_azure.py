"""The signer of ``abfs://``, ``abfss://`` and ``az://`` roots (Azure Data Lake Storage Gen2).

The worker's own filesystem for the root (ObjectStoragePath with the microsoft.azure provider's
``get_fs``: the connection, else adlfs's ambient credentials) gives the account, its blob
endpoint and the credential, so the URLs name the objects the worker writes. It signs

* a blob SAS per file to read (``sr=b``, permission read only);
* a directory SAS per upload prefix (``sr=d``, ``sdd`` = the directory's depth, permissions
  create and write only): the pod may create and overwrite blobs under that directory and do
  nothing else. Only a hierarchical-namespace account (ADLS Gen2) honours a directory SAS. The
  pod sends each file as one Put Blob (``entry.upload``'s ``put`` kind), at most
  ``MAX_PUT_BYTES``.

An account key signs locally; an Entra ID credential (service principal, managed or workload
identity, DefaultAzureCredential) first gets a user delegation key (one request, lifetime at
most 7 days) and signs user-delegation SAS with it. Anything else (anonymous, a SAS token) is
refused, naming the connection. The official SDKs sign (``azure.storage.blob``,
``azure.storage.filedatalake``).
"""

from __future__ import annotations

import datetime
import re
from typing import Any
from urllib.parse import quote

from airflow_stepop.setting_values import SettingsError

MAX_PUT_BYTES = 5000 * 1024**2  # one Put Blob
# a user delegation key's longest (7 days of the service's clock), less a margin for ours
MAX_DELEGATION_S = 7 * 24 * 3600 - 900
STORAGE_SCOPE = "https://storage.azure.com/.default"
# container/path, <conn id>@container/path (Airflow's form), container@account.dfs.<suffix>/path
_URI = re.compile(
    r"^(?:abfss?|az)://(?:[^/@.]+@)?(?P<container>[^/@.]+)(?:@(?P<account>[^./]+)\.[^/]*)?"
    r"(?:/(?P<path>.*))?$"
)


def split(uri: str) -> tuple[str | None, str, str]:
    """(account named in the URI or None, container, path) of an abfs:// URI."""
    m = _URI.match(uri)
    if m is None:
        raise SettingsError(f"{uri!r} is not an abfs:// URL: write abfs://<container>/<path>.")
    return m["account"], m["container"], m["path"] or ""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


class AzureSigner:
    """Blob SAS to read, directory SAS to write, with the account key or a user delegation
    key of the filesystem's credential (``for_root``)."""

    def __init__(self, fs: Any, conn_id: str | None) -> None:
        client = fs.service_client  # adlfs's (aio) BlobServiceClient; no request is made here
        self._fs, self._client = fs, client
        self._conn = repr(conn_id) if conn_id else "(none: adlfs's ambient credentials)"
        self.account = client.account_name
        self.endpoint = client.primary_endpoint.rstrip("/")
        credential = client.credential
        self._key: str | None = getattr(credential, "account_key", None)
        self._delegation: tuple[Any, datetime.datetime] | None = None
        self._ends: datetime.datetime | None = None
        self._hns_checked = False
        if self._key is None and not callable(getattr(credential, "get_token", None)):
            shown = "no credentials" if credential is None else type(credential).__name__
            if "sig=" in (client.url or ""):
                shown = "a SAS token"
            raise SettingsError(
                f"The connection {self._conn} reaches "
                f"the storage account {self.account!r} with {shown}, which cannot sign: a "
                "Kubernetes step's pod reaches an abfs:// artifact root through SAS URLs. Give "
                "it the account key (a connection string with AccountKey, or the account_key "
                "extra) or an Entra ID credential (a service principal: tenant_id, login and "
                "password; a managed or workload identity) with the Storage Blob Data "
                "Contributor role, which may request a user delegation key."
            )

    @classmethod
    def for_root(cls, root: str, conn_id: str | None) -> AzureSigner:
        from airflow.sdk import ObjectStoragePath

        return cls(ObjectStoragePath(root, conn_id=conn_id).fs, conn_id)

    def _expiry(self, expires_s: int) -> datetime.datetime:
        """When this signer's SAS end: one time for all of a Job's URLs, fixed at the first,
        and never past the user delegation key they are signed with."""
        if self._ends is None:
            longest = expires_s if self._key is not None else min(expires_s, MAX_DELEGATION_S)
            self._ends = _now() + datetime.timedelta(seconds=longest)
        return self._ends

    def _credential(self, expires_s: int) -> Any:
        """The account key, else a user delegation key valid until the SAS end (asked once)."""
        if self._key is not None:
            return self._key
        now, expiry = _now(), self._expiry(expires_s)
        if self._delegation is None or self._delegation[1] < expiry:
            from fsspec.asyn import sync

            try:
                key = sync(self._fs.loop, self._client.get_user_delegation_key,
                           now - datetime.timedelta(minutes=5), expiry)  # fmt: skip
            except Exception as exc:
                raise SettingsError(
                    f"The connection {self._conn} could not get a user delegation key for "
                    f"the storage account {self.account!r} ({type(exc).__name__}: {exc}); its "
                    "identity needs a role with generateUserDelegationKey (Storage Blob Data "
                    "Contributor) on the account, or give the connection the account key."
                ) from exc
            self._delegation = (key, expiry)
        return self._delegation[0]

    def _container(self, uri: str) -> tuple[str, str]:
        account, container, path = split(uri)
        if account is not None and account != self.account:
            raise SettingsError(
                f"{uri} is in the storage account {account!r}, but the connection "
                f"{self._conn} signs for {self.account!r}: use that account's connection."
            )
        return container, path

    def get_url(self, uri: str, expires_s: int) -> str:
        from azure.storage.blob import BlobSasPermissions, generate_blob_sas

        container, path = self._container(uri)
        credential = self._credential(expires_s)
        sas = generate_blob_sas(
            self.account, container, path, permission=BlobSasPermissions(read=True),
            expiry=self._expiry(expires_s),
            **({"account_key": credential} if self._key else {"user_delegation_key": credential}),
        )  # fmt: skip
        return f"{self.endpoint}/{container}/{quote(path)}?{sas}"

    def credentials_end(self) -> None:
        """An account key's SAS ends when it says; a user delegation key is asked for as long
        as the URLs must live (at most 7 days, the longest lifetime they are given)."""
        return None

    def _check_hierarchical_namespace(self) -> None:
        """Refuse, before any Job runs, an account whose pods' uploads would be refused after
        the step's work: a directory SAS needs a hierarchical namespace. Best-effort: an
        identity that may not read the account's information is let through."""
        if self._hns_checked:
            return
        from fsspec.asyn import sync

        try:
            info = sync(self._fs.loop, self._client.get_account_information)
        except Exception:  # no right to ask: the pods' uploads say it, if it comes to that
            info = {}
        self._hns_checked = True
        if info.get("is_hns_enabled") is False:
            raise SettingsError(
                f"The storage account {self.account!r} has no hierarchical namespace: a "
                "Kubernetes step's pod writes an abfs:// root under a directory SAS, which only "
                "an ADLS Gen2 account honours. Use a storage account with the hierarchical "
                "namespace enabled, an s3:// or gs:// root, or a file:// root on a shared "
                "volume (artifact_volume=)."
            )

    def upload_grant(self, prefix_uri: str, expires_s: int) -> dict[str, Any]:
        from azure.storage.filedatalake import FileSasPermissions, generate_directory_sas

        self._check_hierarchical_namespace()

        container, directory = self._container(prefix_uri.rstrip("/"))
        sas = generate_directory_sas(
            self.account, container, directory, self._credential(expires_s),
            permission=FileSasPermissions(create=True, write=True),
            expiry=self._expiry(expires_s),
        )  # fmt: skip
        return {"kind": "put", "url": f"{self.endpoint}/{container}/", "query": sas,
                "prefix": directory + "/", "max_bytes": MAX_PUT_BYTES}  # fmt: skip
