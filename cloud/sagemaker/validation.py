"""What the SageMaker fake refuses, in the words of AWS's front end (HTTP 400).

:class:`ApiError` is a refused call; :class:`ClientError` a job that fails because of what its
request asked for (FailureReason ``ClientError: ...``).

:class:`Validator` checks a request against the input shape of botocore's service model (the
constraints the real front end enforces: required members, lengths, patterns, enums, ranges)
and words each failure as AWS does (``1 validation error detected: Value ... at '...' failed
to satisfy constraint: ...``). :func:`check_create` adds CreateTrainingJob's own rules
(resource config, spot, channels).
"""

from __future__ import annotations

import json
import re
from typing import Any


class ApiError(Exception):
    """An error answer in the AWS JSON shape."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


class ClientError(Exception):
    """A job failure caused by the request (FailureReason ``ClientError: ...``)."""


def _camel(name: str) -> str:
    return name[:1].lower() + name[1:]


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict | list):
        return json.dumps(value)[:200]
    return str(value)[:200]


class Validator:
    """Constraint checks of one input shape; messages as AWS's front end words them."""

    def __init__(self, types: list[str]) -> None:
        self.instance_types = types
        self.errors: list[str] = []

    def fail(self, value: Any, path: str, constraint: str) -> None:
        shown = "null" if value is None else f"'{_show(value)}'"
        self.errors.append(f"Value {shown} at '{path}' failed to satisfy constraint: {constraint}")

    def check(self, shape: Any, value: Any, path: str) -> None:
        meta = shape.metadata
        kind = shape.type_name
        if kind == "structure":
            if not isinstance(value, dict):
                raise ApiError("SerializationException", f"Expected an object at {path or '/'}")
            for name in shape.required_members:
                if value.get(name) is None:
                    self.fail(None, self._join(path, name), "Member must not be null")
            for name, member in shape.members.items():
                if value.get(name) is not None:
                    self.check(member, value[name], self._join(path, name))
        elif kind == "list":
            if not isinstance(value, list):
                raise ApiError("SerializationException", f"Expected a list at {path}")
            self._length(value, path, meta, "Member")
            for i, item in enumerate(value):
                self.check(shape.member, item, f"{path}.{i + 1}.member")
        elif kind == "map":
            if not isinstance(value, dict):
                raise ApiError("SerializationException", f"Expected a map at {path}")
            self._length(value, path, meta, "Member")
            for key, item in value.items():
                sub = Validator(self.instance_types)
                sub.check(shape.key, key, path)
                sub.check(shape.value, item, path)
                for err in sub.errors:
                    constraint = err.split("failed to satisfy constraint: ", 1)[1]
                    self.fail(
                        {key: item}, path, f"Map value must satisfy constraint: [{constraint}]"
                    )
        elif kind == "string":
            if not isinstance(value, str):
                raise ApiError("SerializationException", f"Expected a string at {path}")
            enum = list(getattr(shape, "enum", None) or [])
            if shape.name == "TrainingInstanceType":
                enum = self.instance_types
            if enum and value not in enum:
                self.fail(value, path, f"Member must satisfy enum value set: [{', '.join(enum)}]")
                return
            self._length(value, path, meta, "Member")
            pattern = meta.get("pattern")
            if pattern and not _fullmatch(pattern, value):
                self.fail(value, path, f"Member must satisfy regular expression pattern: {pattern}")
        elif kind in ("integer", "long"):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ApiError("SerializationException", f"Expected an integer at {path}")
            if "min" in meta and value < meta["min"]:
                self.fail(
                    value, path, f"Member must have value greater than or equal to {meta['min']}"
                )
            if "max" in meta and value > meta["max"]:
                self.fail(
                    value, path, f"Member must have value less than or equal to {meta['max']}"
                )
        elif kind == "boolean" and not isinstance(value, bool):
            raise ApiError("SerializationException", f"Expected a boolean at {path}")

    def _length(self, value: Any, path: str, meta: dict[str, Any], what: str) -> None:
        if "min" in meta and len(value) < meta["min"]:
            self.fail(
                value, path, f"{what} must have length greater than or equal to {meta['min']}"
            )
        if "max" in meta and len(value) > meta["max"]:
            self.fail(value, path, f"{what} must have length less than or equal to {meta['max']}")

    @staticmethod
    def _join(path: str, name: str) -> str:
        return f"{path}.{_camel(name)}" if path else _camel(name)

    def raise_if_any(self) -> None:
        if self.errors:
            n = len(self.errors)
            head = f"{n} validation error{'s' if n > 1 else ''} detected: "
            raise ApiError("ValidationException", head + "; ".join(self.errors))


_PATTERNS: dict[str, re.Pattern[str] | None] = {}


def _fullmatch(pattern: str, value: str) -> bool:
    if pattern not in _PATTERNS:
        try:
            _PATTERNS[pattern] = re.compile(pattern, re.DOTALL)
        except re.error:  # a Java-only construct: do not refuse what we cannot check
            _PATTERNS[pattern] = None
    compiled = _PATTERNS[pattern]
    return compiled is None or compiled.fullmatch(value) is not None


def check_create(v: Validator, body: dict[str, Any]) -> None:
    """CreateTrainingJob's rules beyond the shape (``v`` holds the shape's failures so far)."""
    if "ServerlessJobConfig" not in body:
        for key in ("AlgorithmSpecification", "ResourceConfig", "StoppingCondition"):
            if body.get(key) is None:
                v.fail(None, _camel(key), "Member must not be null")
    rc = body.get("ResourceConfig") or {}
    if rc and "InstanceGroups" not in rc:
        for key in ("InstanceType", "InstanceCount", "VolumeSizeInGB"):
            if rc.get(key) is None:
                v.fail(None, f"resourceConfig.{_camel(key)}", "Member must not be null")
        count = rc.get("InstanceCount")
        if isinstance(count, int) and count < 1:
            v.fail(count, "resourceConfig.instanceCount",
                   "Member must have value greater than or equal to 1")  # fmt: skip
    v.raise_if_any()
    algo = body["AlgorithmSpecification"]
    if not algo.get("TrainingImage") and not algo.get("AlgorithmName"):
        raise ApiError(
            "ValidationException",
            "Either TrainingImage or AlgorithmName must be specified in AlgorithmSpecification.",
        )
    if algo.get("ContainerArguments") and not algo.get("ContainerEntrypoint"):
        raise ApiError(
            "ValidationException",
            "ContainerArguments can only be specified together with ContainerEntrypoint.",
        )
    stopping = body["StoppingCondition"]
    wait, runtime = stopping.get("MaxWaitTimeInSeconds"), stopping.get("MaxRuntimeInSeconds")
    if body.get("EnableManagedSpotTraining"):
        if wait is None:
            raise ApiError(
                "ValidationException",
                "Invalid MaxWaitTimeInSeconds. It is required for managed spot training.",
            )
        if runtime is not None and wait < runtime:
            raise ApiError(
                "ValidationException",
                f"Invalid MaxWaitTimeInSeconds. It must be greater than or equal to "
                f"MaxRuntimeInSeconds ({wait} < {runtime}).",
            )
    elif wait is not None:
        raise ApiError(
            "ValidationException",
            "Invalid MaxWaitTimeInSeconds. It is only supported when EnableManagedSpotTraining "
            "is set to true.",
        )
    names = [c["ChannelName"] for c in body.get("InputDataConfig", [])]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ApiError("ValidationException", f"Channel names must be unique: {sorted(dup)}")
