"""What the CodeBuild fake refuses, in CodeBuild's error shape (HTTP 400, ``__type``).

Every request is checked against its input shape in botocore's ``codebuild`` service model with
the SageMaker fake's :class:`~cloud.sagemaker.validation.Validator` (required members, lengths,
patterns, enums, ranges; AWS's ``1 validation error detected: ...`` wording), answered as
``InvalidInputException``, the error CodeBuild's operations declare. The rules of CreateProject
and StartBuild beyond the shapes follow.
"""

from __future__ import annotations

from typing import Any

from cloud.sagemaker.validation import ApiError, Validator

__all__ = ["ApiError", "check_create_project", "check_shape", "check_start_build", "invalid"]

RESERVED_PREFIX = "CODEBUILD_"


def invalid(message: str) -> ApiError:
    """CodeBuild's refusal of a request it cannot act on."""
    return ApiError("InvalidInputException", message)


def check_shape(model: Any, operation: str, body: dict[str, Any]) -> None:
    """``body`` against the operation's input shape; the first failures refuse it."""
    v = Validator([])
    v.check(model.operation_model(operation).input_shape, body, "")
    try:
        v.raise_if_any()
    except ApiError as err:
        raise invalid(err.message) from err


def _check_variables(variables: list[dict[str, Any]]) -> None:
    for var in variables:
        name = var["name"]
        if name.startswith(RESERVED_PREFIX):
            raise invalid(
                f"Invalid environment variable name: {name}. Environment variable names starting "
                f"with {RESERVED_PREFIX} are reserved for internal use."
            )


def _check_source(kind: str, location: str | None, buildspec: str | None) -> None:
    if kind == "S3" and not location:
        raise invalid("Invalid input: source location is required for source type S3")
    if kind == "NO_SOURCE" and not buildspec:
        raise invalid("Invalid input: buildspec is required for source type NO_SOURCE")
    if kind == "NO_SOURCE" and location:
        raise invalid("Invalid input: source location must not be set for source type NO_SOURCE")


def _check_logs(config: dict[str, Any] | None) -> None:
    cw = (config or {}).get("cloudWatchLogs") or {}
    if cw.get("status") == "DISABLED" and (cw.get("groupName") or cw.get("streamName")):
        raise invalid(
            "Invalid input: CloudWatch Logs group name and stream name must not be set when "
            "CloudWatch Logs status is DISABLED"
        )


def check_create_project(body: dict[str, Any]) -> None:
    """CreateProject's rules beyond the shape (the role is checked by the caller, in IAM)."""
    source = body["source"]
    _check_source(source["type"], source.get("location"), source.get("buildspec"))
    _check_variables(body["environment"].get("environmentVariables", []))
    _check_logs(body.get("logsConfig"))
    limit = body.get("concurrentBuildLimit")
    if limit is not None and limit < 1:
        raise invalid("Invalid input: concurrentBuildLimit must be at least 1")


def check_start_build(project: dict[str, Any], body: dict[str, Any]) -> None:
    """StartBuild's rules beyond the shape, given the project it starts."""
    source = project["source"]
    kind = body.get("sourceTypeOverride", source["type"])
    location = body.get("sourceLocationOverride")
    if location is None and "sourceTypeOverride" not in body:
        location = source.get("location")
    buildspec = body.get("buildspecOverride", source.get("buildspec"))
    _check_source(kind, location, buildspec)
    _check_variables(body.get("environmentVariablesOverride", []))
    _check_logs(body.get("logsConfigOverride"))
