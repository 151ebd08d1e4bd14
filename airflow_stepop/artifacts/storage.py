"""Object storage for the worker: the runtime's Storage, with Airflow connections attached."""

from __future__ import annotations

from typing import Any

from airflow_stepop.artifacts.retry import RetryingStorage
from airflow_stepop.runtime.storage import Storage


def worker_storage(conn_id: str | None = None) -> Storage:
    """A Storage whose remote filesystems carry the credentials of an Airflow connection, and
    whose remote calls are retried on transient faults (``artifacts/retry.py``)."""

    def resolve(uri: str) -> tuple[Any, str]:
        from airflow.sdk import ObjectStoragePath

        path = ObjectStoragePath(uri, conn_id=conn_id)
        return path.fs, path.path

    return RetryingStorage(resolver=resolve)


def missing_store(root: str, storage: Storage) -> str | None:
    """The bucket or container of a remote ``root`` (``s3://bucket``) when it does not exist, to
    name it when staging there fails; None when it exists, or when that cannot be told."""
    scheme, found, rest = root.partition("://")
    if not found or scheme == "file" or not rest:
        return None
    store = f"{scheme}://{rest.split('/', 1)[0]}"
    try:
        return None if storage.exists(store) else store
    except Exception:  # the original failure says more than this one
        return None
