"""Status conditions (Jobs' and Pods'), ``completedIndexes`` ranges and ``podFailurePolicy``.

A condition changes its ``lastTransitionTime`` only when its status changes, as the
controllers keep them; Job conditions also carry ``lastProbeTime``.
"""

from __future__ import annotations

from typing import Any

from cloud.kubernetes.api import k8s_time


def condition(conditions: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    return next((c for c in conditions if c.get("type") == kind), None)


def is_true(conditions: list[dict[str, Any]] | None, kind: str) -> bool:
    found = condition(conditions or [], kind)
    return found is not None and found.get("status") == "True"


def set_condition(
    conditions: list[dict[str, Any]],
    kind: str,
    status: str,
    reason: str | None = None,
    message: str | None = None,
    now: float | None = None,
    probe: bool = False,
) -> bool:
    """Add or update the condition ``kind``; whether its status changed. ``probe``: a Job's
    condition, whose ``lastProbeTime`` is set too (a Pod's stays null)."""
    found = condition(conditions, kind)
    if found is not None and (found.get("status"), found.get("reason"), found.get("message")) == (
        status,
        reason,
        message,
    ):
        return False
    changed = found is None or found.get("status") != status
    entry: dict[str, Any] = {
        "type": kind,
        "status": status,
        "lastProbeTime": k8s_time(now) if probe else None,
        "lastTransitionTime": k8s_time(now) if changed else found.get("lastTransitionTime"),
    }
    if reason is not None:
        entry["reason"] = reason
    if message is not None:
        entry["message"] = message
    if found is None:
        conditions.append(entry)
    else:
        found.clear()
        found.update(entry)
    return changed


def index_ranges(indexes: set[int]) -> str:
    """``{0, 1, 2, 4}`` -> ``"0-2,4"`` (the Job's ``completedIndexes``)."""
    parts: list[str] = []
    ordered = sorted(indexes)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def failure_policy_action(job: dict[str, Any], pod: dict[str, Any]) -> tuple[str, str] | None:
    """The ``podFailurePolicy`` rule a failed pod matches: (action, message), or None.

    Rules match on the exit codes of terminated containers (``In``/``NotIn``, a ``NotIn`` rule
    never matching exit code 0) or on pod conditions (``DisruptionTarget``...); the first that
    matches decides: ``FailJob``, ``Ignore`` (not counted against ``backoffLimit``), ``Count``.
    """
    policy = (job["spec"].get("podFailurePolicy") or {}).get("rules") or []
    meta = pod["metadata"]
    who = f"{meta.get('namespace')}/{meta['name']}"
    statuses = pod["status"].get("containerStatuses") or []
    for at, rule in enumerate(policy):
        action = rule.get("action", "Count")
        codes = rule.get("onExitCodes")
        if codes:
            values = set(codes.get("values") or [])
            for status in statuses:
                if codes.get("containerName") not in (None, status.get("name")):
                    continue
                code = ((status.get("state") or {}).get("terminated") or {}).get("exitCode")
                if code is None:
                    continue
                hit = (
                    code in values
                    if codes.get("operator") == "In"
                    else (code not in values and code != 0)
                )
                if hit:
                    return action, (
                        f"Container {status.get('name')} for pod {who} failed with exit code "
                        f"{code} matching {action} rule at index {at}"
                    )
        for wanted in rule.get("onPodConditions") or []:
            found = condition(pod["status"].get("conditions") or [], wanted.get("type"))
            if found is not None and found.get("status") == wanted.get("status", "True"):
                return action, (
                    f"Pod {who} has condition {wanted.get('type')} matching {action} rule at "
                    f"index {at}"
                )
    return None
