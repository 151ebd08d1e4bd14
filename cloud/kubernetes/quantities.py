"""Resource quantities (``500m``, ``32Gi``, ``1e3``) and what a pod asks of a node.

Exact arithmetic (fractions), so ``0.5`` and ``500m`` are the same amount, as in the API's
``resource.Quantity``.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

QUANTITY_RE = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_PARTS = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][-+]?\d+)?$"
)
_SUFFIX = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    **{s: Fraction(1024**i) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), 1)},
}


def parse_quantity(value: Any) -> Fraction:
    """A quantity as an exact number; ValueError with the API's message when malformed."""
    if isinstance(value, bool):
        raise ValueError(_malformed())
    if isinstance(value, int | float):
        return Fraction(value)
    m = _PARTS.match(str(value).strip())
    if m is None:
        raise ValueError(_malformed())
    number, suffix = Fraction(m.group(1)), m.group(2) or ""
    if suffix[:1] in ("e", "E"):
        return number * Fraction(10) ** int(suffix[1:])
    return number * _SUFFIX[suffix]


def _malformed() -> str:
    return f"quantities must match the regular expression '{QUANTITY_RE}'"


def container_requests(container: dict[str, Any]) -> dict[str, Fraction]:
    """What a container requests: ``requests``, and ``limits`` for what requests leave out
    (the API defaults a request to its limit)."""
    resources = container.get("resources") or {}
    wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {name: parse_quantity(value) for name, value in wanted.items()}


def pod_requests(spec: dict[str, Any]) -> dict[str, Fraction]:
    """What a pod asks of its node: its containers' requests summed, the largest init
    container's where that is more, and one ``pods`` slot."""
    total: dict[str, Fraction] = {"pods": Fraction(1)}
    for container in spec.get("containers") or []:
        for name, amount in container_requests(container).items():
            total[name] = total.get(name, Fraction(0)) + amount
    for container in spec.get("initContainers") or []:
        for name, amount in container_requests(container).items():
            total[name] = max(total.get(name, Fraction(0)), amount)
    return total


def gpus(spec: dict[str, Any]) -> Fraction:
    """The GPUs (``nvidia.com/gpu``) one pod of ``spec`` asks for."""
    return pod_requests(spec).get("nvidia.com/gpu", Fraction(0))


def qos_class(spec: dict[str, Any]) -> str:
    """Guaranteed (every container limits cpu and memory at its requests), BestEffort (nothing
    asked), else Burstable."""
    containers = spec.get("containers") or []
    asked = [c.get("resources") or {} for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in asked):
        return "BestEffort"
    for resources in asked:
        limits = resources.get("limits") or {}
        requests = {**limits, **(resources.get("requests") or {})}
        for name in ("cpu", "memory"):
            if name not in limits or parse_quantity(limits[name]) != parse_quantity(requests[name]):
                return "Burstable"
    return "Guaranteed"
