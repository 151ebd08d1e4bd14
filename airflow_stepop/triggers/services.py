"""The services a trigger follows, made in the triggerer from their import path and arguments:
a step's backend, or the builder of its image (both ``JobService``s)."""

from __future__ import annotations

from typing import Any

from airflow_stepop.backends.base import JobService


def load_backend(path: str, kwargs: dict[str, Any]) -> Any:
    """A ``JobService`` (a step backend, an image builder) made from its path and arguments."""
    from airflow.sdk.module_loading import import_string

    return import_string(path)(**kwargs)


def prepared_service(path: str, kwargs: dict[str, Any]) -> JobService:
    """The service, ready for its async calls (call it in a thread: it imports and reads)."""
    service = load_backend(path, kwargs)
    service.prepare_async()
    return service


def service_and_group(path: str, kwargs: dict[str, Any]) -> tuple[JobService, str]:
    """The service and its poll group (which may read a connection: call it in a thread)."""
    service = load_backend(path, kwargs)
    return service, service.poll_group()
