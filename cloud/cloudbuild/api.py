"""Google's API shapes for the Cloud Build fake: errors, the Build message, operations, tokens.

Requests and answers go through the client library's own protobuf messages
(``google.cloud.devtools.cloudbuild_v1``): a request body is parsed into a ``Build`` as the
service's JSON mapping does (an unknown field, a malformed duration or enum is refused with 400
INVALID_ARGUMENT), and every answer is rendered from one, with enums as numbers when the client
asks for ``$alt=json;enum-encoding=int`` (the python client always does), as names otherwise.
"""

from __future__ import annotations

import base64
from typing import Any

from google.cloud.devtools.cloudbuild_v1 import Build, BuildOperationMetadata
from google.protobuf import json_format

from cloud.fake_http import Request, Response

_STATUS = {
    400: "INVALID_ARGUMENT",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "ALREADY_EXISTS",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
BUILD_TYPE = "type.googleapis.com/google.devtools.cloudbuild.v1.Build"
METADATA_TYPE = "type.googleapis.com/google.devtools.cloudbuild.v1.BuildOperationMetadata"
# google.rpc.Code of a finished build's operation error, by build status.
OPERATION_ERRORS = {
    "FAILURE": (2, "Build failed; check build logs for details"),
    "INTERNAL_ERROR": (13, "Build failed with an internal error"),
    "TIMEOUT": (4, "Build timed out"),
    "CANCELLED": (1, "Build was cancelled"),
    "EXPIRED": (4, "Build expired before it started"),
}


class ApiError(Exception):
    """A refusal in Google's error shape (``status`` overrides the one the HTTP code implies)."""

    def __init__(self, code: int, message: str, status: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status or _STATUS.get(code, "UNKNOWN")


def google_error(code: int, message: str, status: str | None = None) -> Response:
    """``{"error": {"code", "message", "status"}}`` as Google APIs answer."""
    body = {"code": code, "message": message, "status": status or _STATUS.get(code, "UNKNOWN")}
    return Response(code, {"error": body})


def invalid(message: str) -> ApiError:
    """Cloud Build's refusal of a build it will not run."""
    return ApiError(400, f"invalid build: {message}")


def parse_build(body: Any) -> dict[str, Any]:
    """A request's Build as the JSON mapping reads it: camelCase names, enums as names."""
    if not isinstance(body, dict):
        raise ApiError(400, "Invalid JSON payload received. Expected an object for 'build'.")
    message = Build.pb(Build())
    try:
        json_format.ParseDict(body, message)
    except json_format.ParseError as exc:
        raise ApiError(400, f"Invalid JSON payload received. {exc}") from exc
    return json_format.MessageToDict(message)


def ints(req: Request) -> bool:
    """Whether the client asked for enums as numbers."""
    return "enum-encoding=int" in (req.arg("$alt") or "")


def render_build(resource: dict[str, Any], as_ints: bool) -> dict[str, Any]:
    """A Build for the answer (checked against the message: the fake's own mistakes fail)."""
    message = Build.pb(Build())
    json_format.ParseDict(resource, message)
    return json_format.MessageToDict(message, use_integers_for_enums=as_ints)


def render_operation(
    name: str, resource: dict[str, Any], status: str, done: bool, as_ints: bool
) -> dict[str, Any]:
    """The google.longrunning Operation of a build: its metadata holds the build."""
    metadata = BuildOperationMetadata.pb(BuildOperationMetadata())
    json_format.ParseDict({"build": resource}, metadata)
    out: dict[str, Any] = {
        "name": name,
        "metadata": {
            "@type": METADATA_TYPE,
            **json_format.MessageToDict(metadata, use_integers_for_enums=as_ints),
        },
        "done": done,
    }
    if done and status in OPERATION_ERRORS:
        code, message = OPERATION_ERRORS[status]
        out["error"] = {"code": code, "message": message}
    elif done:
        out["response"] = {"@type": BUILD_TYPE, **render_build(resource, as_ints)}
    return out


def operation_name(project: str, location: str, build_id: str) -> str:
    """``operations/build/<project>/<base64 id>`` (global) or the location's operation name."""
    if location == "global":
        encoded = base64.urlsafe_b64encode(build_id.encode()).decode().rstrip("=")
        return f"operations/build/{project}/{encoded}"
    return f"projects/{project}/locations/{location}/operations/{build_id}"


def build_id_of_operation(name: str) -> str | None:
    """The build an operation name stands for, None when it names none of ours."""
    parts = name.split("/")
    if len(parts) == 4 and parts[:2] == ["operations", "build"]:
        encoded = parts[3] + "=" * (-len(parts[3]) % 4)
        try:
            return base64.urlsafe_b64decode(encoded.encode()).decode()
        except (ValueError, UnicodeDecodeError):
            return None
    if len(parts) == 6 and parts[0] == "projects" and parts[4] == "operations":
        return parts[5]
    return None


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
