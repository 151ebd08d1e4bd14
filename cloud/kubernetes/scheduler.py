"""Where a pod fits, and the scheduler's message when it fits nowhere.

A node fits a pod when, in the default scheduler's filter order: it is schedulable and Ready
(else its not-ready taint), the pod tolerates its NoSchedule/NoExecute taints (``Equal`` or
``Exists``, effect matching or empty), it matches the pod's ``nodeSelector`` and required node
affinity, and its allocatable minus what the pods bound to it (not yet finished) request leaves
room for the pod's requests: cpu, memory, ``pods`` and extended resources such as
``nvidia.com/gpu`` (limits stand for requests left out). A pod that fits nowhere gets the
scheduler's words: ``0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't
match Pod's node affinity/selector. preemption: 0/2 nodes are available: 1 No preemption victims
found for incoming pod, 1 Preemption is not helpful for scheduling.``
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from typing import Any

from cloud.kubernetes.nodes import is_ready
from cloud.kubernetes.quantities import parse_quantity, pod_requests
from cloud.kubernetes.selectors import expressions_match

AFFINITY = "node(s) didn't match Pod's node affinity/selector"
UNSCHEDULABLE = "node(s) were unschedulable"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
_BLOCKING = ("NoSchedule", "NoExecute")


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    """Whether one of ``tolerations`` tolerates ``taint``."""
    for toleration in tolerations:
        effect = toleration.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key")
        if (toleration.get("operator") or "Equal") == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif key == taint.get("key") and (toleration.get("value") or "") == (
            taint.get("value") or ""
        ):
            return True
    return False


def _affinity_matches(spec: dict[str, Any], labels: dict[str, str]) -> bool:
    selector = spec.get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    return not terms or any(
        expressions_match(term.get("matchExpressions") or [], labels) for term in terms
    )


def used_on(node_name: str, pods: list[dict[str, Any]]) -> dict[str, Fraction]:
    """What the pods bound to ``node_name`` and not finished request."""
    used: dict[str, Fraction] = {}
    for pod in pods:
        if pod["spec"].get("nodeName") != node_name or pod["status"].get("phase") in (
            "Succeeded",
            "Failed",
        ):
            continue
        for name, amount in pod_requests(pod["spec"]).items():
            used[name] = used.get(name, Fraction(0)) + amount
    return used


def node_reasons(
    spec: dict[str, Any], node: dict[str, Any], used: dict[str, Fraction]
) -> tuple[list[str], bool]:
    """Why ``node`` does not fit a pod of ``spec`` (empty: it fits), and whether preemption
    could help (only where resources are short)."""
    node_spec = node.get("spec") or {}
    if node_spec.get("unschedulable"):
        return [UNSCHEDULABLE], False
    tolerations = spec.get("tolerations") or []
    taints = list(node_spec.get("taints") or [])
    if not is_ready(node):
        taints.append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
    for taint in taints:
        if taint.get("effect") in _BLOCKING and not tolerates(tolerations, taint):
            shown = f"{{{taint['key']}: {taint.get('value') or ''}}}"
            return [f"node(s) had untolerated taint {shown}"], False
    if not _affinity_matches(spec, node["metadata"].get("labels") or {}):
        return [AFFINITY], False
    allocatable = {k: parse_quantity(v) for k, v in node["status"]["allocatable"].items()}
    short = []
    for name, amount in sorted(pod_requests(spec).items()):
        if amount <= 0:
            continue
        if used.get(name, Fraction(0)) + amount > allocatable.get(name, Fraction(0)):
            short.append("Too many pods" if name == "pods" else f"Insufficient {name}")
    return short, bool(short)


def place(
    spec: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> tuple[str | None, str]:
    """The node a pod of ``spec`` goes to (the least used of those that fit), or None and the
    scheduler's message."""
    if not nodes:
        return None, "no nodes available to schedule pods"
    reasons: Counter[str] = Counter()
    preemption: Counter[str] = Counter()
    fits: list[tuple[Fraction, str]] = []
    for node in nodes:
        name = node["metadata"]["name"]
        used = used_on(name, pods)
        why, resolvable = node_reasons(spec, node, used)
        if not why:
            fits.append((used.get("pods", Fraction(0)), name))
            continue
        reasons.update(why)
        preemption[NO_VICTIMS if resolvable else NOT_HELPFUL] += 1
    if fits:
        return min(fits)[1], ""
    total = len(nodes)
    listed = ", ".join(sorted(f"{n} {why}" for why, n in reasons.items()))
    victims = ", ".join(sorted(f"{n} {why}" for why, n in preemption.items()))
    return None, (
        f"0/{total} nodes are available: {listed}. "
        f"preemption: 0/{total} nodes are available: {victims}."
    )
