"""ResourceQuota: a namespace's hard limits, and the admission that refuses a pod past them.

As kube-apiserver's quota admission: a pod whose creation would take a namespace's usage of a
``spec.hard`` key past its limit is refused with 403 ``exceeded quota``. Usage is that of the
namespace's pods not yet ended. Keys: ``pods`` (``count/pods``), ``requests.<resource>`` (and
``cpu``/``memory`` bare, which mean requests) and ``limits.<resource>``. A Job's pods are made
by the job controller, so the refusal reaches the user as the Job's ``FailedCreate`` event
(``jobcontroller``). ``status.used`` is not kept.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from cloud.kubernetes.api import PODS, RESOURCE_QUOTAS, Cause, Kind, invalid
from cloud.kubernetes.podspec import is_terminal
from cloud.kubernetes.quantities import parse_quantity, pod_requests
from cloud.kubernetes.store import Store


def validate_quota(kind: Kind, body: dict[str, Any]) -> dict[str, Any]:
    """422 for a ``spec.hard`` value that is not a quantity."""
    for key, value in ((body.get("spec") or {}).get("hard") or {}).items():
        try:
            parse_quantity(value)
        except ValueError:
            cause = Cause(f"spec.hard[{key}]", "FieldValueInvalid",
                          f'Invalid value: "{value}": must be a quantity')  # fmt: skip
            raise invalid(kind, body["metadata"].get("name", ""), [cause]) from None
    body.setdefault("status", {"hard": dict((body.get("spec") or {}).get("hard") or {})})
    return body


def _usage(key: str, spec: dict[str, Any]) -> Fraction:
    """What one pod of ``spec`` takes of the quota key ``key``."""
    if key in ("pods", "count/pods"):
        return Fraction(1)
    if key.startswith("limits."):
        name = key.removeprefix("limits.")
        return sum(
            (parse_quantity(((c.get("resources") or {}).get("limits") or {}).get(name, 0))
             for c in spec.get("containers") or []),
            Fraction(0),
        )  # fmt: skip
    name = key.removeprefix("requests.")
    return pod_requests(spec).get(name, Fraction(0))


def _text(amount: Fraction) -> str:
    return str(amount.numerator) if amount.denominator == 1 else str(float(amount))


def refusal(store: Store, namespace: str, pod: dict[str, Any]) -> str | None:
    """Why quota admission refuses ``pod`` in ``namespace``, in kube-apiserver's words."""
    running = [p["spec"] for p in store.items(PODS.resource, namespace) if not is_terminal(p)]
    meta = pod["metadata"]
    # the prefix, not the generated name: the job controller asks again each pass, and one
    # event counted up is what a user sees of a refusal that repeats
    name = meta.get("generateName") or meta.get("name", "")
    for quota in store.items(RESOURCE_QUOTAS.resource, namespace):
        for key, hard in ((quota.get("spec") or {}).get("hard") or {}).items():
            asked = _usage(key, pod["spec"])
            if not asked:
                continue
            used = sum((_usage(key, spec) for spec in running), Fraction(0))
            if used + asked > parse_quantity(hard):
                return (
                    f'pods "{name}" is forbidden: exceeded quota: {quota["metadata"]["name"]}, '
                    f"requested: {key}={_text(asked)}, used: {key}={_text(used)}, "
                    f"limited: {key}={hard}"
                )
    return None
