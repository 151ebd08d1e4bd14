"""Object-store calls from the worker that survive transient faults (5xx, throttling, resets).

Staging a step, reading its result and ``ArtifactRef.load()`` all go through
:class:`RetryingStorage`: a remote call that fails transiently is retried with jittered
exponential backoff; anything else (a missing object, a denied request) fails at once. Local
paths are not retried. Object stores make an object visible only once its upload completed, and
local writes go through a temporary file and a rename, so a reader never sees half a spec.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from airflow_stepop.runtime.storage import Storage

log = logging.getLogger(__name__)

T = TypeVar("T")
ATTEMPTS = 5
FIRST_DELAY_SECONDS = 0.5
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
TRANSIENT_CODES = frozenset(
    {"SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "Throttling",
     "ThrottlingException", "RequestLimitExceeded", "ServerBusy", "OperationTimedOut"}
)  # fmt: skip


def _status(exc: BaseException) -> int | None:
    """The HTTP status an error carries, whichever client raised it."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):  # botocore
        code = response.get("Error", {}).get("Code")
        if code in TRANSIENT_CODES:
            return 503
        return response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    for name in ("status_code", "code", "status"):  # azure-core, gcsfs/google-api-core, aiohttp
        value = getattr(exc, name, None)
        if isinstance(value, int) and 100 <= value < 600:
            return value
    return None


def is_transient(exc: BaseException) -> bool:
    """Worth a retry: a 5xx or throttling answer, or a broken connection, anywhere in the chain.

    fsspec filesystems translate client errors into OSError and keep the original as the cause,
    so the whole chain is read; a missing object or a denied request is never transient.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (FileNotFoundError, PermissionError, IsADirectoryError)):
            return False
        if isinstance(current, (ConnectionError, TimeoutError)):
            return True
        if _status(current) in TRANSIENT_STATUS:
            return True
        if type(current).__name__ in ("ClientConnectionError", "ServerDisconnectedError",
                                      "ClientOSError", "EndpointConnectionError",
                                      "ConnectionClosedError", "ReadTimeoutError"):  # fmt: skip
            return True
        current = current.__cause__ or current.__context__
    return False


def retried(call: Callable[[], T], what: str) -> T:
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return call()
        except Exception as exc:
            if attempt == ATTEMPTS or not is_transient(exc):
                raise
            delay = FIRST_DELAY_SECONDS * 2 ** (attempt - 1) * random.uniform(0.5, 1.0)
            log.warning("%s failed (%s); retry %d in %.1fs", what, exc, attempt, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


class RetryingStorage(Storage):
    """A Storage whose remote calls are retried on transient faults."""

    def _remote(self, uri: str, call: Callable[[], T], what: str) -> T:
        if self.local_path(uri) is not None:
            return call()
        return retried(call, f"{what} {uri}")

    def exists(self, uri: str) -> bool:
        return self._remote(uri, lambda: super(RetryingStorage, self).exists(uri), "Checking")

    def read_bytes(self, uri: str) -> bytes:
        return self._remote(uri, lambda: super(RetryingStorage, self).read_bytes(uri), "Reading")

    def write_bytes(self, uri: str, data: bytes) -> None:
        self._remote(uri, lambda: super(RetryingStorage, self).write_bytes(uri, data), "Writing")

    def put(self, source: Path, uri: str) -> None:
        self._remote(uri, lambda: super(RetryingStorage, self).put(source, uri), "Uploading")

    def download(self, uri: str, target: Path) -> None:
        self._remote(uri, lambda: super(RetryingStorage, self).download(uri, target), "Downloading")
