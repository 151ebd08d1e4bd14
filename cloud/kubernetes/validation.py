"""What kube-apiserver refuses at create, in its words: 400 for a body it cannot decode, 422
Invalid (with ``details.causes``) for names, labels, quantities and Job, Secret, Service and
Namespace specs that break the API's rules.

A malformed quantity (``cpu: "lots"``) is a decode error, 400 BadRequest ``Job in version "v1"
cannot be handled as a Job: quantities must match the regular expression ...``, as on a real
cluster; a well-formed but negative quantity, or a request above its limit, is 422.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from cloud.kubernetes.api import Cause, Kind, bad_request, invalid
from cloud.kubernetes.quantities import parse_quantity

_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_LABEL_1123 = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_1035 = r"[a-z]([-a-z0-9]*[a-z0-9])?"
_NAME_PART = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
_CONFIG_KEY = r"[-._a-zA-Z0-9]+"

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    f"for validation is '{_SUBDOMAIN}')"
)
LABEL_1123_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    f"used for validation is '{_LABEL_1123}')"
)
LABEL_1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    f"'abc-123', regex used for validation is '{_LABEL_1035}')"
)
NAME_PART_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used "
    f"for validation is '{_NAME_PART}')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    f"'my_value',  or '12345', regex used for validation is '{_LABEL_VALUE}')"
)
CONFIG_KEY_MSG = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
    f"'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '{_CONFIG_KEY}')"
)


def _bad(field: str, value: Any, why: str) -> Cause:
    shown = f'"{value}"' if isinstance(value, str) else str(value)
    return Cause(field, "FieldValueInvalid", f"Invalid value: {shown}: {why}")


def _required(field: str, why: str = "") -> Cause:
    return Cause(field, "FieldValueRequired", "Required value" + (f": {why}" if why else ""))


def _unsupported(field: str, value: str, allowed: tuple[str, ...]) -> Cause:
    listed = ", ".join(f'"{a}"' for a in allowed)
    return Cause(
        field, "FieldValueNotSupported", f'Unsupported value: "{value}": supported values: {listed}'
    )


def name_causes(name: Any, field: str, pattern: str, message: str, limit: int) -> list[Cause]:
    if not name:
        return [_required(field, "name or generateName is required")]
    if not isinstance(name, str):
        return [_bad(field, name, message)]
    causes = []
    if len(name) > limit:
        causes.append(_bad(field, name, f"must be no more than {limit} characters"))
    if not re.fullmatch(pattern, name):
        causes.append(_bad(field, name, message))
    return causes


def subdomain_causes(name: Any, field: str = "metadata.name") -> list[Cause]:
    return name_causes(name, field, _SUBDOMAIN, SUBDOMAIN_MSG, 253)


def label_causes(labels: Any, field: str) -> list[Cause]:
    """Label keys (optional DNS prefix, a name part) and values (63 characters at most)."""
    causes: list[Cause] = []
    for key, value in (labels or {}).items():
        prefix, slash, part = str(key).rpartition("/")
        if slash and (not prefix or len(prefix) > 253 or not re.fullmatch(_SUBDOMAIN, prefix)):
            causes.append(_bad(field, key, "prefix part " + SUBDOMAIN_MSG))
        if len(part) > 63:
            causes.append(_bad(field, key, "name part must be no more than 63 characters"))
        elif not re.fullmatch(_NAME_PART, part):
            causes.append(_bad(field, key, NAME_PART_MSG))
        if not isinstance(value, str):
            causes.append(_bad(field, value, LABEL_VALUE_MSG))
        elif len(value) > 63:
            causes.append(_bad(field, value, "must be no more than 63 characters"))
        elif not re.fullmatch(_LABEL_VALUE, value):
            causes.append(_bad(field, value, LABEL_VALUE_MSG))
    return causes


def check_decodable(kind: Kind, body: Any) -> dict[str, Any]:
    """The body as an object of ``kind``, or 400 as the decoder refuses it."""
    if not isinstance(body, dict):
        raise bad_request(f"the body of the request was not a {kind.kind} object")
    if body.get("kind") not in (None, kind.kind) or body.get("apiVersion") not in (
        None,
        kind.api_version,
    ):
        raise bad_request(
            f"the API version in the data ({body.get('apiVersion')}) does not match the expected "
            f"API version ({kind.api_version})"
        )
    if not isinstance(body.get("metadata", {}), dict):
        raise bad_request(f'{kind.kind} in version "v1" cannot be handled as a {kind.kind}')
    return body


def pod_spec_causes(kind: Kind, spec: dict[str, Any], field: str) -> list[Cause]:
    """Containers (name, image, quantities, mounts) and volumes of a pod spec; a malformed
    quantity raises 400 (it would not decode)."""
    causes: list[Cause] = []
    containers = spec.get("containers") or []
    if not containers:
        causes.append(_required(f"{field}.containers"))
    volumes = {v.get("name") for v in spec.get("volumes") or []}
    seen: set[str] = set()
    for i, container in enumerate(containers):
        at = f"{field}.containers[{i}]"
        name = container.get("name")
        if not name:
            causes.append(_required(f"{at}.name"))
        else:
            causes += name_causes(name, f"{at}.name", _LABEL_1123, LABEL_1123_MSG, 63)
            if name in seen:
                causes.append(
                    Cause(f"{at}.name", "FieldValueDuplicate", f'Duplicate value: "{name}"')
                )
            seen.add(name)
        if not container.get("image"):
            causes.append(_required(f"{at}.image"))
        causes += _resource_causes(kind, container.get("resources") or {}, f"{at}.resources")
        for j, mount in enumerate(container.get("volumeMounts") or []):
            if mount.get("name") not in volumes:
                causes.append(
                    Cause(
                        f"{at}.volumeMounts[{j}].name",
                        "FieldValueNotFound",
                        f'Not found: "{mount.get("name")}"',
                    )
                )
            if not mount.get("mountPath"):
                causes.append(_required(f"{at}.volumeMounts[{j}].mountPath"))
        for j, env in enumerate(container.get("env") or []):
            if not env.get("name"):
                causes.append(_required(f"{at}.env[{j}].name"))
    for i, volume in enumerate(spec.get("volumes") or []):
        causes += name_causes(
            volume.get("name"), f"{field}.volumes[{i}].name", _LABEL_1123, LABEL_1123_MSG, 63
        )
    return causes


def _resource_causes(kind: Kind, resources: dict[str, Any], field: str) -> list[Cause]:
    causes: list[Cause] = []
    amounts: dict[str, dict[str, Any]] = {}
    for part in ("limits", "requests"):
        for name, value in (resources.get(part) or {}).items():
            try:
                amount = parse_quantity(value)
            except ValueError as exc:
                raise bad_request(
                    f'{kind.kind} in version "v1" cannot be handled as a {kind.kind}: {exc}'
                ) from exc
            amounts.setdefault(part, {})[name] = amount
            if amount < 0:
                causes.append(
                    _bad(
                        f"{field}.{part}[{name}]", str(value), "must be greater than or equal to 0"
                    )
                )
    for name, request in amounts.get("requests", {}).items():
        limit = amounts.get("limits", {}).get(name)
        if limit is not None and request > limit:
            shown = resources["limits"][name]
            causes.append(
                _bad(
                    f"{field}.requests",
                    str(resources["requests"][name]),
                    f"must be less than or equal to {name} limit of {shown}",
                )
            )
    return causes


def validate_job(kind: Kind, job: dict[str, Any]) -> None:
    """Refuse a Job the API would (422), before defaults are filled in."""
    meta = job.get("metadata") or {}
    name = meta.get("name") or ""
    spec = job.get("spec") or {}
    template = spec.get("template") or {}
    pod_spec = template.get("spec") or {}
    causes = subdomain_causes(name)
    if len(name) > 63:  # it becomes the value of the pods' job-name labels
        causes.append(_bad("spec.template.labels", name, "must be no more than 63 characters"))
    causes += label_causes(meta.get("labels"), "metadata.labels")
    causes += label_causes(
        (template.get("metadata") or {}).get("labels"), "spec.template.metadata.labels"
    )
    for field in (
        "parallelism",
        "completions",
        "backoffLimit",
        "activeDeadlineSeconds",
        "ttlSecondsAfterFinished",
    ):
        value = spec.get(field)
        if value is not None and (not isinstance(value, int) or value < 0):
            causes.append(_bad(f"spec.{field}", value, "must be greater than or equal to 0"))
    mode = spec.get("completionMode") or "NonIndexed"
    if mode not in ("NonIndexed", "Indexed"):
        causes.append(_unsupported("spec.completionMode", mode, ("NonIndexed", "Indexed")))
    if mode == "Indexed" and spec.get("completions") is None:
        causes.append(_required("spec.completions", "when completion mode is Indexed"))
    if not template.get("spec"):
        causes.append(_required("spec.template.spec.containers"))
    else:
        causes += pod_spec_causes(kind, pod_spec, "spec.template.spec")
    policy = pod_spec.get("restartPolicy") or "Always"  # the pod default, then refused
    if template.get("spec") and policy not in ("OnFailure", "Never"):
        causes.append(
            _unsupported("spec.template.spec.restartPolicy", policy, ("OnFailure", "Never"))
        )
    if causes:
        raise invalid(kind, name, causes)


def secret_data(kind: Kind, secret: dict[str, Any]) -> dict[str, str]:
    """The Secret's ``data`` with ``stringData`` folded in (base64), after its checks."""
    name = (secret.get("metadata") or {}).get("name") or ""
    causes = subdomain_causes(name) + label_causes(
        (secret.get("metadata") or {}).get("labels"), "metadata.labels"
    )
    data = dict(secret.get("data") or {})
    for value in data.values():
        try:
            base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise bad_request(
                f'Secret in version "v1" cannot be handled as a Secret: illegal base64 data ({exc})'
            ) from exc
    for key, value in (secret.get("stringData") or {}).items():
        data[key] = base64.b64encode(str(value).encode()).decode()
    for key in data:
        if not re.fullmatch(_CONFIG_KEY, key):
            causes.append(_bad(f"data[{key}]", key, CONFIG_KEY_MSG))
    if sum(len(base64.b64decode(v)) for v in data.values()) > 1024 * 1024:
        causes.append(
            Cause("data", "FieldValueTooLong", "Too long: must have at most 1048576 bytes")
        )
    if causes:
        raise invalid(kind, name, causes)
    return data


def validate_service(kind: Kind, service: dict[str, Any]) -> None:
    meta = service.get("metadata") or {}
    name = meta.get("name") or ""
    spec = service.get("spec") or {}
    causes = name_causes(name, "metadata.name", _LABEL_1035, LABEL_1035_MSG, 63)
    causes += label_causes(meta.get("labels"), "metadata.labels")
    ports = spec.get("ports") or []
    if not ports and spec.get("clusterIP") != "None":
        causes.append(_required("spec.ports"))
    for i, port in enumerate(ports):
        number = port.get("port")
        if not isinstance(number, int) or not 1 <= number <= 65535:
            causes.append(
                _bad(f"spec.ports[{i}].port", number, "must be between 1 and 65535, inclusive")
            )
    if causes:
        raise invalid(kind, name, causes)


def validate_namespace(kind: Kind, namespace: dict[str, Any]) -> None:
    meta = namespace.get("metadata") or {}
    name = meta.get("name") or ""
    causes = name_causes(name, "metadata.name", _LABEL_1123, LABEL_1123_MSG, 63)
    causes += label_causes(meta.get("labels"), "metadata.labels")
    if causes:
        raise invalid(kind, name, causes)
