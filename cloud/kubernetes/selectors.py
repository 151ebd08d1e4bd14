"""Label and field selectors, parsed as kube-apiserver parses them.

``labelSelector``: comma-separated requirements, all of which must hold: ``k=v``, ``k==v``,
``k!=v`` (also true without the label), ``k in (a,b)``, ``k notin (a,b)`` (also true without the
label), ``k`` (exists), ``!k`` (does not exist), ``k>n``/``k<n``. ``fieldSelector``: ``f=v``,
``f==v``, ``f!=v`` on the fields each resource supports (others: 400 "field label not
supported"). Also the ``matchExpressions`` of a node affinity term and a ``LabelSelector``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cloud.kubernetes.api import ApiError, bad_request

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET = re.compile(rf"^\s*!?\s*({_KEY})\s+(in|notin)\s*\((.*)\)\s*$")
_CMP = re.compile(rf"^\s*({_KEY})\s*(==|!=|=|>|<)\s*(\S*)\s*$")
_EXISTS = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


@dataclass(frozen=True)
class Requirement:
    """One requirement: ``key`` ``op`` (=, !=, in, notin, exists, !, gt, lt) ``values``."""

    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        value = labels.get(self.key)
        if self.op in ("=", "in"):
            return has and value in self.values
        if self.op in ("!=", "notin"):
            return not has or value not in self.values
        if self.op == "exists":
            return has
        if self.op == "!":
            return not has
        try:
            number, bound = int(value or ""), int(self.values[0])
        except ValueError:
            return False
        return number > bound if self.op == ">" else number < bound


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def parse_label_selector(text: str | None) -> list[Requirement]:
    """The requirements of a ``labelSelector``; 400 BadRequest when it does not parse."""
    requirements = []
    for part in _split_top_level(text or ""):
        if m := _SET.match(part):
            if part.strip().startswith("!"):
                raise _unparsable(part)
            values = tuple(v.strip() for v in m.group(4).split(",") if v.strip())
            if not all(re.fullmatch(_VALUE, v) for v in values):
                raise _unparsable(part)
            requirements.append(Requirement(m.group(1), m.group(3), values))
        elif m := _CMP.match(part):
            op = "=" if m.group(3) == "==" else m.group(3)
            if op in (">", "<") and not re.fullmatch(r"-?\d+", m.group(4)):
                raise _unparsable(part)
            if op in ("=", "!=") and not re.fullmatch(_VALUE, m.group(4)):
                raise _unparsable(part)
            requirements.append(Requirement(m.group(1), op, (m.group(4),)))
        elif m := _EXISTS.match(part):
            requirements.append(Requirement(m.group(2), "!" if m.group(1) else "exists"))
        else:
            raise _unparsable(part)
    return requirements


def _unparsable(part: str) -> ApiError:
    return bad_request(f"unable to parse requirement: found '{part.strip()}', expected: selector")


def labels_match(requirements: list[Requirement], labels: Mapping[str, str] | None) -> bool:
    return all(r.matches(labels or {}) for r in requirements)


def expressions_match(expressions: list[dict[str, Any]], labels: Mapping[str, str]) -> bool:
    """``matchExpressions`` (In, NotIn, Exists, DoesNotExist, Gt, Lt), all of which must hold."""
    ops = {
        "In": "in",
        "NotIn": "notin",
        "Exists": "exists",
        "DoesNotExist": "!",
        "Gt": ">",
        "Lt": "<",
    }
    return all(
        Requirement(
            e["key"], ops.get(e.get("operator", ""), "in"), tuple(e.get("values") or ())
        ).matches(labels)
        for e in expressions
    )


# --- field selectors --------------------------------------------------------------------------
def _path(*names: str) -> Callable[[dict[str, Any]], str]:
    def read(obj: dict[str, Any]) -> str:
        value: Any = obj
        for name in names:
            value = value.get(name) if isinstance(value, dict) else None
        if isinstance(value, bool):
            return str(value).lower()
        return "" if value is None else str(value)

    return read


_COMMON = {
    "metadata.name": _path("metadata", "name"),
    "metadata.namespace": _path("metadata", "namespace"),
}
FIELDS: dict[str, dict[str, Callable[[dict[str, Any]], str]]] = {
    "jobs": {**_COMMON, "status.successful": _path("status", "succeeded")},
    "pods": {
        **_COMMON,
        **{
            f"spec.{f}": _path("spec", f)
            for f in (
                "nodeName",
                "restartPolicy",
                "schedulerName",
                "serviceAccountName",
                "hostNetwork",
            )
        },
        **{f"status.{f}": _path("status", f) for f in ("phase", "podIP", "nominatedNodeName")},
    },
    "events": {
        **_COMMON,
        **{
            f"involvedObject.{f}": _path("involvedObject", f)
            for f in (
                "kind",
                "namespace",
                "name",
                "uid",
                "apiVersion",
                "resourceVersion",
                "fieldPath",
            )
        },
        "reason": _path("reason"),
        "reportingComponent": _path("reportingComponent"),
        "source": _path("source", "component"),
        "type": _path("type"),
    },
    "secrets": {**_COMMON, "type": _path("type")},
    "services": dict(_COMMON),
    "resourcequotas": dict(_COMMON),
    "namespaces": {**_COMMON, "status.phase": _path("status", "phase")},
    "nodes": {**_COMMON, "spec.unschedulable": _path("spec", "unschedulable")},
}


@dataclass(frozen=True)
class FieldRequirement:
    read: Callable[[dict[str, Any]], str]
    equal: bool
    value: str

    def matches(self, obj: dict[str, Any]) -> bool:
        return (self.read(obj) == self.value) == self.equal


def parse_field_selector(resource: str, text: str | None) -> list[FieldRequirement]:
    """The requirements of a ``fieldSelector`` on ``resource``; 400 when a field is not one the
    resource supports or the selector does not parse."""
    fields = FIELDS.get(resource, _COMMON)
    requirements = []
    for part in (text or "").split(","):
        if not part.strip():
            continue
        m = re.fullmatch(r"\s*([^=!\s]+)\s*(==|!=|=)\s*(.*?)\s*", part)
        if m is None:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        name, op, value = m.groups()
        if name not in fields:
            raise bad_request(f"field label not supported: {name}")
        requirements.append(FieldRequirement(fields[name], op != "!=", value))
    return requirements


def fields_match(requirements: list[FieldRequirement], obj: dict[str, Any]) -> bool:
    return all(r.matches(obj) for r in requirements)
