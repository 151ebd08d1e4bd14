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
