"""Job inputs and outputs of the Azure ML fake against Azurite.

Real Azure ML mounts (``ro_mount``/``rw_mount``) or copies (``download``/``upload``) data
between the job's datastores and the node. The fake always copies: inputs are downloaded
before the job starts, outputs uploaded after it exits (whatever the mode). A job that reads
an output while it is being written, or expects a mount's lazy reads, sees the difference.
``direct`` inputs and outputs are not copied: the command gets the URI itself.

URIs understood: ``azureml://datastores/<ds>/paths/<p>``, the long form
``azureml://subscriptions/.../workspaces/<ws>/datastores/<ds>/paths/<p>``, and
``wasbs://<container>@<account>.blob.core.windows.net/<p>`` /
``https://<account>.blob.core.windows.net/<container>/<p>`` (the account is ignored: Azurite
has one).
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any

_AZUREML = re.compile(r"^azureml://(?:subscriptions/[^/]+/resourcegroups/[^/]+/workspaces/[^/]+/)?"
                      r"datastores/(?P<ds>[^/]+)/paths/(?P<path>.*)$", re.IGNORECASE)  # fmt: skip
_WASBS = re.compile(r"^wasbs?://(?P<container>[^@]+)@[^/]+/(?P<path>.*)$")
_HTTPS = re.compile(r"^https?://[^/]+/(?P<container>[^/]+)/(?P<path>.*)$")


def parse_uri(uri: str, datastores: dict[str, str]) -> tuple[str, str]:
    """``uri`` -> (container, blob prefix); ``datastores`` maps datastore name -> container.

    Raises ValueError with a message for people when the URI cannot be resolved.
    """
    m = _AZUREML.match(uri)
    if m:
        ds = m["ds"]
        if ds not in datastores:
            raise ValueError(
                f"Datastore '{ds}' of '{uri}' does not exist in the workspace "
                f"(known: {sorted(datastores)})."
            )
        return datastores[ds], m["path"]
    for pattern in (_WASBS, _HTTPS):
        m = pattern.match(uri)
        if m:
            return m["container"], m["path"]
    raise ValueError(
        f"Unsupported data URI '{uri}': use azureml://datastores/<name>/paths/<path>, "
        "wasbs:// or https:// blob URIs."
    )


def blob_service(connection_string: str) -> Any:
    """A BlobServiceClient on Azurite."""
    from azure.storage.blob import BlobServiceClient

    return BlobServiceClient.from_connection_string(connection_string)


def ensure_container(service: Any, container: str) -> None:
    from azure.core.exceptions import ResourceExistsError

    with contextlib.suppress(ResourceExistsError):
        service.create_container(container)


def download(service: Any, container: str, path: str, target: str, is_file: bool) -> int:
    """Copy a blob (``is_file``) or every blob under ``path/`` into ``target``; returns count.

    Raises FileNotFoundError when nothing is there (Azure ML fails the job the same way).
    """
    client = service.get_container_client(container)
    if is_file:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        blob = client.get_blob_client(path)
        if not blob.exists():
            raise FileNotFoundError(f"{container}/{path}")
        with open(target, "wb") as f:
            blob.download_blob().readinto(f)
        return 1
    os.makedirs(target, exist_ok=True)
    prefix = path.rstrip("/") + "/" if path.strip("/") else ""
    count = 0
    if not client.exists():
        raise FileNotFoundError(f"container {container}")
    for item in client.list_blobs(name_starts_with=prefix):
        rel = item.name[len(prefix) :]
        if not rel or rel.endswith("/"):
            continue
        dest = os.path.join(target, rel)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "wb") as f:
            client.get_blob_client(item.name).download_blob().readinto(f)
        count += 1
    if count == 0 and prefix:
        raise FileNotFoundError(f"{container}/{prefix}")
    return count


def upload(service: Any, container: str, path: str, source: str) -> list[str]:
    """Upload every file under ``source`` to ``container/path/``; returns blob names."""
    ensure_container(service, container)
    client = service.get_container_client(container)
    prefix = path.strip("/")
    names: list[str] = []
    for dirpath, _dirs, files in os.walk(source):
        for fname in files:
            full = os.path.join(dirpath, fname)
            rel = os.path.relpath(full, source).replace(os.sep, "/")
            name = f"{prefix}/{rel}" if prefix else rel
            with open(full, "rb") as f:
                client.upload_blob(name, f, overwrite=True)
            names.append(name)
    return names


def upload_text(service: Any, container: str, name: str, text: str) -> None:
    ensure_container(service, container)
    service.get_container_client(container).upload_blob(name, text.encode(), overwrite=True)
