"""Kubernetes' own rules for the names and small objects a step's arguments carry.

Checked when the DAG is parsed (no cluster call), so a label, a toleration or a resource name
the API server would refuse with a 422 fails the import instead, naming the argument, the
value and one that works. The patterns are the API server's (apimachinery's validation).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_stepop.backends import arguments as check
from airflow_stepop.setting_values import SettingsError

# A DNS-1123 label: namespaces, Jobs (they name their pods' hostnames), Services.
DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
# A DNS-1123 subdomain: Secrets, service accounts, priority classes.
DNS_SUBDOMAIN = r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_NAME_PART = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
# A label or annotation key: an optional DNS subdomain prefix, then a name of at most 63.
QUALIFIED_NAME = rf"({DNS_SUBDOMAIN}/)?{_NAME_PART}"
LABEL_VALUE = rf"({_NAME_PART})?"
# An extended resource (a device plugin's): vendor-domain/name, e.g. nvidia.com/gpu.
EXTENDED_RESOURCE = rf"{DNS_SUBDOMAIN}/{_NAME_PART}"
TOLERATION_OPERATORS = ("Equal", "Exists")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")
MAX_ANNOTATION_BYTES = 256 * 1024  # the API server's limit on a object's annotations, in all


def name(owner: str, field: str, value: Any, *, pattern: str, what: str, example: str) -> str:
    """A required name (a namespace, a queue); None is refused too."""
    checked = check.matching(owner, field, value, pattern, what, example)
    if checked is None:
        raise SettingsError(f"{owner}.{field} is required; use e.g. {example!r}.")
    return checked


def labels(owner: str, field: str, value: Any, *, reserved: Sequence[str] = ()) -> dict[str, str]:
    """Labels for the Job and its pods: Kubernetes' key and value rules; none of ours."""
    out = check.string_map(
        owner, field, value,
        key_pattern=QUALIFIED_NAME,
        key_rule="a label key is a name of at most 63 letters, digits, '-', '_' or '.', with "
        "an optional DNS prefix: e.g. 'team' or 'example.com/team'.",
        value_pattern=LABEL_VALUE,
        value_rule="a label value is at most 63 letters, digits, '-', '_' or '.', starting and "
        "ending with a letter or digit (or empty), e.g. 'ml-platform'.",
    )  # fmt: skip
    _refuse_reserved(owner, field, out, reserved)
    return out


def annotations(
    owner: str, field: str, value: Any, *, reserved: Sequence[str] = ()
) -> dict[str, str]:
    """Annotations: label-key rules for the keys, any text for the values (256 KiB in all)."""
    out = check.string_map(
        owner, field, value,
        key_pattern=QUALIFIED_NAME,
        key_rule="an annotation key is a name of at most 63 letters, digits, '-', '_' or '.', "
        "with an optional DNS prefix: e.g. 'example.com/owner'.",
        value_rule="annotation values are strings.",
    )  # fmt: skip
    size = sum(len(k.encode()) + len(v.encode()) for k, v in out.items())
    if size > MAX_ANNOTATION_BYTES:
        raise SettingsError(
            f"{owner}.{field} holds {size} bytes; Kubernetes takes at most "
            f"{MAX_ANNOTATION_BYTES} bytes of annotations on an object: keep large values in "
            "the artifact store and annotate their URL."
        )
    _refuse_reserved(owner, field, out, reserved)
    return out


def _refuse_reserved(
    owner: str, field: str, given: Mapping[str, str], reserved: Sequence[str]
) -> None:
    for key in given:
        if key in reserved or key.startswith("stepop.io/"):
            raise SettingsError(
                f"{owner}.{field} has the key {key!r}, which airflow-stepop sets itself (it "
                "finds, re-attaches and queues the step's Job by it): use another key."
            )


def node_selector(owner: str, field: str, value: Any) -> dict[str, str]:
    """A pod's nodeSelector: node label key -> value, both by the label rules."""
    return check.string_map(
        owner, field, value,
        key_pattern=QUALIFIED_NAME,
        key_rule="a node label key is e.g. 'cloud.google.com/gke-nodepool' or "
        "'node.kubernetes.io/instance-type'.",
        value_pattern=LABEL_VALUE,
        value_rule="a node label value is at most 63 letters, digits, '-', '_' or '.', e.g. "
        "'gpu-pool'.",
    )  # fmt: skip


def tolerations(owner: str, field: str, value: Any) -> tuple[dict[str, Any], ...]:
    """Pod tolerations as the API takes them: dicts of key, operator, value, effect and
    tolerationSeconds, each checked for its shape."""
    example = "[{'key': 'nvidia.com/gpu', 'operator': 'Exists', 'effect': 'NoSchedule'}]"
    if value is None:
        return ()
    if isinstance(value, (str, Mapping)) or not isinstance(value, Sequence):
        raise SettingsError(f"{owner}.{field}={value!r} must be a list of dicts, e.g. {example}.")
    out = []
    for index, item in enumerate(value):
        where = f"{owner}.{field}[{index}]"
        if not isinstance(item, Mapping):
            raise SettingsError(f"{where}={item!r} must be a dict, e.g. {example}.")
        unknown = sorted(set(item) - set(_TOLERATION_KEYS))
        if unknown:
            raise SettingsError(
                f"{where} has the key {unknown[0]!r}; a toleration's keys are "
                f"{', '.join(_TOLERATION_KEYS)}, e.g. {example}."
            )
        operator = item.get("operator", "Equal")
        if operator not in TOLERATION_OPERATORS:
            raise SettingsError(
                f"{where}['operator']={operator!r} must be 'Equal' or 'Exists', e.g. {example}."
            )
        key = item.get("key")
        if key is not None and (not isinstance(key, str) or not re.fullmatch(QUALIFIED_NAME, key)):
            raise SettingsError(
                f"{where}['key']={key!r} is not a taint key such as 'nvidia.com/gpu'."
            )
        if key is None and operator != "Exists":
            raise SettingsError(
                f"{where} has no key, which tolerates every taint only with operator 'Exists'."
            )
        tolerated = item.get("value")
        if operator == "Exists" and tolerated:
            raise SettingsError(f"{where} has operator 'Exists' and a value: drop the value.")
        if tolerated is not None and (
            not isinstance(tolerated, str) or not re.fullmatch(LABEL_VALUE, tolerated)
        ):
            raise SettingsError(
                f"{where}['value']={tolerated!r} is not a taint value such as 'present'."
            )
        effect = item.get("effect")
        if effect is not None and effect not in TAINT_EFFECTS:
            raise SettingsError(
                f"{where}['effect']={effect!r} must be one of {', '.join(TAINT_EFFECTS)} (or "
                "left out: every effect)."
            )
        seconds = item.get("tolerationSeconds")
        if seconds is not None:
            if effect != "NoExecute":
                raise SettingsError(
                    f"{where} has tolerationSeconds, which only a 'NoExecute' effect takes."
                )
            check.whole_number(where, "tolerationSeconds", seconds, low=0, high=2**31 - 1)
        out.append({k: item[k] for k in _TOLERATION_KEYS if item.get(k) is not None})
    return tuple(out)


def secret_names(owner: str, field: str, value: Any) -> tuple[str, ...]:
    """``image_pull_secrets``: the names of Secrets in the Job's namespace."""
    if isinstance(value, str):
        value = [value]
    return check.id_list(owner, field, value, DNS_SUBDOMAIN, "regcred", limit=64, service="a pod")


def gpu_resource(owner: str, field: str, value: Any) -> str:
    """The extended resource a GPU is requested as: ``nvidia.com/gpu``, ``amd.com/gpu``..."""
    return name(
        owner, field, value, pattern=EXTENDED_RESOURCE,
        what="an extended resource name (vendor-domain/name)", example="nvidia.com/gpu",
    )  # fmt: skip
