"""The API's vocabulary: resource kinds, ``Status`` errors and the time formats.

Every error a client sees is a ``Status`` object with the code, reason and message wording of
kube-apiserver, because the clients (and the code that uses them) read ``reason``, ``code``
and ``details``: :class:`ApiError` carries one out of a handler.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "AlreadyExists",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


@dataclass(frozen=True)
class Kind:
    """One served resource: ``jobs`` of ``batch/v1`` is ``Kind("jobs", "Job", "batch")``."""

    resource: str
    kind: str
    group: str = ""
    namespaced: bool = True
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/v1" if self.group else "v1"

    @property
    def qualified(self) -> str:
        """How messages name the resource: ``jobs.batch``, ``pods``."""
        return f"{self.resource}.{self.group}" if self.group else self.resource

    def typed(self, obj: dict[str, Any]) -> dict[str, Any]:
        """``obj`` with its ``kind`` and ``apiVersion`` (list items carry neither)."""
        return {"kind": self.kind, "apiVersion": self.api_version, **obj}


JOBS = Kind("jobs", "Job", "batch")
PODS = Kind("pods", "Pod", short_names=("po",))
EVENTS = Kind("events", "Event", short_names=("ev",))
SECRETS = Kind("secrets", "Secret")
SERVICES = Kind("services", "Service", short_names=("svc",))
NAMESPACES = Kind("namespaces", "Namespace", namespaced=False, short_names=("ns",))
NODES = Kind("nodes", "Node", namespaced=False, short_names=("no",))
RESOURCE_QUOTAS = Kind("resourcequotas", "ResourceQuota", short_names=("quota",))
CORE_KINDS = (PODS, EVENTS, SECRETS, SERVICES, NAMESPACES, NODES, RESOURCE_QUOTAS)


class ApiError(Exception):
    """A refusal, answered as a ``Status`` with this code, reason, message and details."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "InternalError")
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        return status_body(self.code, self.reason, self.message, self.details)


def status_body(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A failure ``Status`` as kube-apiserver writes it."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def success_status(kind: Kind, name: str, uid: str) -> dict[str, Any]:
    """What a DELETE answers once the object is gone."""
    details = {"name": name, "group": kind.group, "kind": kind.resource, "uid": uid}
    if not kind.group:
        del details["group"]
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }


def _details(kind: Kind, name: str) -> dict[str, Any]:
    details = {"name": name, "group": kind.group, "kind": kind.resource}
    if not kind.group:
        del details["group"]
    return details


def not_found(kind: Kind, name: str) -> ApiError:
    return ApiError(404, f'{kind.qualified} "{name}" not found', details=_details(kind, name))


def already_exists(kind: Kind, name: str) -> ApiError:
    return ApiError(409, f'{kind.qualified} "{name}" already exists', details=_details(kind, name))


def namespace_not_found(namespace: str) -> ApiError:
    return not_found(NAMESPACES, namespace)


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


@dataclass(frozen=True)
class Cause:
    """One field error of a 422: ``spec.completions: Required value: ...``."""

    field: str
    reason: str  # FieldValueInvalid, FieldValueRequired, FieldValueNotSupported...
    message: str  # what follows the field name, e.g. 'Invalid value: "x": must be ...'

    def line(self) -> str:
        return f"{self.field}: {self.message}"


def invalid(kind: Kind, name: str, causes: list[Cause]) -> ApiError:
    """422 Invalid: ``Job.batch "x" is invalid: <cause>`` (several in brackets)."""
    qualified = f"{kind.kind}.{kind.group}" if kind.group else kind.kind
    lines = [c.line() for c in causes]
    listed = lines[0] if len(lines) == 1 else "[" + ", ".join(lines) + "]"
    details: dict[str, Any] = {"name": name, "group": kind.group, "kind": kind.kind}
    if not kind.group:
        del details["group"]
    details["causes"] = [
        {"reason": c.reason, "message": c.message, "field": c.field} for c in causes
    ]
    return ApiError(422, f'{qualified} "{name}" is invalid: {listed}', details=details)


# --- times ------------------------------------------------------------------------------------
def k8s_time(ts: float | None = None) -> str:
    """``metav1.Time``: RFC 3339 in UTC to the second (``2026-01-01T00:00:00Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if ts is None else ts))


def nano_time(ns: int) -> str:
    """A log line's timestamp: RFC 3339 with nanoseconds, fixed width, as the kubelet writes."""
    seconds, fraction = divmod(ns, 1_000_000_000)
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(seconds))}.{fraction:09d}Z"


def parse_time(text: str) -> float:
    """An RFC 3339 time (``Z`` or an offset, any fraction) as epoch seconds; ValueError if not."""
    value = text.strip().replace("z", "Z")
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    head, dot, rest = value.partition(".")
    if dot:  # fromisoformat takes at most microseconds
        digits = len(rest) - len(rest.lstrip("0123456789"))
        value = f"{head}.{rest[:digits][:6].ljust(6, '0')}{rest[digits:]}"
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return parsed.astimezone(UTC).timestamp()


def new_uid() -> str:
    return str(uuid.uuid4())
