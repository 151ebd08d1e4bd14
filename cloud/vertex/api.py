"""Google's API shapes for the Vertex AI fake: errors, enums, JSON field names, page tokens.

Vertex answers errors as ``{"error": {"code", "message", "status", "details"}}`` and enums as
numbers when the client asks for ``$alt=json;enum-encoding=int`` (the python client always
does), as names otherwise; requests may name fields in camelCase (JSON) or snake_case (proto).
Every handler raises :class:`ApiError` to refuse; ``VertexService.dispatch`` answers it.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from cloud.fake_http import Response

# google.rpc.Code numbers used in CustomJob.error
CODE_CANCELLED = 1
CODE_INVALID_ARGUMENT = 3
CODE_DEADLINE_EXCEEDED = 4
CODE_RESOURCE_EXHAUSTED = 8
CODE_INTERNAL = 13
CODE_UNAVAILABLE = 14

_HTTP_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "ALREADY_EXISTS",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

ENUMS: dict[str, dict[str, int]] = {
    "JobState": {
        "JOB_STATE_UNSPECIFIED": 0,
        "JOB_STATE_QUEUED": 1,
        "JOB_STATE_PENDING": 2,
        "JOB_STATE_RUNNING": 3,
        "JOB_STATE_SUCCEEDED": 4,
        "JOB_STATE_FAILED": 5,
        "JOB_STATE_CANCELLING": 6,
        "JOB_STATE_CANCELLED": 7,
        "JOB_STATE_PAUSED": 8,
        "JOB_STATE_EXPIRED": 9,
        "JOB_STATE_UPDATING": 10,
        "JOB_STATE_PARTIALLY_SUCCEEDED": 11,
    },
    "Strategy": {
        "STRATEGY_UNSPECIFIED": 0,
        "ON_DEMAND": 1,
        "LOW_COST": 2,
        "STANDARD": 3,
        "SPOT": 4,
        "FLEX_START": 6,
    },
    "AcceleratorType": {
        "ACCELERATOR_TYPE_UNSPECIFIED": 0,
        "NVIDIA_TESLA_K80": 1,
        "NVIDIA_TESLA_P100": 2,
        "NVIDIA_TESLA_V100": 3,
        "NVIDIA_TESLA_P4": 4,
        "NVIDIA_TESLA_T4": 5,
        "TPU_V2": 6,
        "TPU_V3": 7,
        "NVIDIA_TESLA_A100": 8,
        "NVIDIA_A100_80GB": 9,
        "TPU_V4_POD": 10,
        "NVIDIA_L4": 11,
        "TPU_V5_LITEPOD": 12,
        "NVIDIA_H100_80GB": 13,
        "NVIDIA_H100_MEGA_80GB": 14,
        "NVIDIA_H200_141GB": 15,
        "NVIDIA_B200": 16,
        "NVIDIA_GB200": 17,
        "NVIDIA_RTX_PRO_6000": 18,
    },
}
_ENUM_TYPE_URL = {
    "Strategy": "google.cloud.aiplatform.v1.Scheduling.Strategy",
    "AcceleratorType": "google.cloud.aiplatform.v1.AcceleratorType",
}
SEGMENT = r"[^/:]+"
# ``/v1/projects/{p}/locations/{l}``, the parent of every CustomJob route.
PARENT = rf"/v1/projects/(?P<project>{SEGMENT})/locations/(?P<location>{SEGMENT})"


class ApiError(Exception):
    """A refusal in Google's error shape."""

    def __init__(self, status: int, message: str, details: list[dict[str, Any]] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.details = details or []


def google_error(
    status: int, message: str, details: list[dict[str, Any]] | None = None
) -> Response:
    """``{"error": {"code", "message", "status"[, "details"]}}`` as Google APIs answer."""
    err: dict[str, Any] = {
        "code": status,
        "message": message,
        "status": _HTTP_STATUS.get(status, "UNKNOWN"),
    }
    if details:
        err["details"] = details
    return Response(status, {"error": err})


def get_field(obj: dict[str, Any] | None, camel: str, default: Any = None) -> Any:
    """Field by its JSON (camelCase) name, accepting the proto (snake_case) name too."""
    if not obj:
        return default
    if camel in obj:
        return obj[camel]
    snake = re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel)
    return obj.get(snake, default)


def enum_name(kind: str, value: Any, field_path: str) -> str:
    """Enum by name or number -> name; refuses what the JSON mapping refuses."""
    table = ENUMS[kind]
    if isinstance(value, bool):
        value = str(value)
    if isinstance(value, int):
        for name, num in table.items():
            if num == value:
                return name
    elif isinstance(value, str) and value in table:
        return value
    shown = json.dumps(value) if isinstance(value, str) else str(value)
    raise ApiError(
        400,
        f"Invalid value at '{field_path}' (type.googleapis.com/{_ENUM_TYPE_URL.get(kind, kind)})"
        f", {shown}",
        [
            {
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [
                    {
                        "field": field_path,
                        "description": f"Invalid value at '{field_path}', {shown}",
                    }
                ],
            }
        ],
    )


def render(obj: Any, ints: bool) -> Any:
    """Deep copy for output with enums as numbers when the client asked for them."""
    if isinstance(obj, dict):
        out = {}
        for key, val in obj.items():
            if ints and key == "state" and isinstance(val, str) and val in ENUMS["JobState"]:
                out[key] = ENUMS["JobState"][val]
            elif ints and key == "strategy" and val in ENUMS["Strategy"]:
                out[key] = ENUMS["Strategy"][val]
            elif ints and key == "acceleratorType" and val in ENUMS["AcceleratorType"]:
                out[key] = ENUMS["AcceleratorType"][val]
            else:
                out[key] = render(val, ints)
        return out
    if isinstance(obj, list):
        return [render(v, ints) for v in obj]
    return obj


def encode_token(offset: int) -> str:
    return base64.urlsafe_b64encode(f"o:{offset}".encode()).decode()


def decode_token(token: str | None) -> int:
    if not token:
        return 0
    try:
        kind, _, num = base64.urlsafe_b64decode(token.encode()).decode().partition(":")
        if kind != "o":
            raise ValueError(token)
        return int(num)
    except ValueError as exc:
        raise ApiError(400, "Invalid page token.") from exc
