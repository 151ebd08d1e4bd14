"""VM sizes Azure ML serverless jobs accept as ``resources.instanceType`` (for refusals).

A subset of the Azure VM sizes offered for Azure ML compute (public "Supported VM series and
sizes" page; not re-verified size by size against a live region, so fix entries here when a
real refusal disagrees): the general-purpose and memory-optimized sizes a CPU step
uses, and the GPU sizes (NC/ND/NV families) a GPU step uses, with their GPU type and count so
tests can check a catalog's mapping. Azure compares VM sizes case-insensitively.
"""

from __future__ import annotations

# size -> (gpu type or "", gpu count)
_CPU = [
    *(f"Standard_DS{n}_v2" for n in (1, 2, 3, 4, 5, 11, 12, 13, 14, 15)),
    *(f"Standard_D{n}_v2" for n in (1, 2, 3, 4, 5, 11, 12, 13, 14)),
    *(f"Standard_D{n}s_v3" for n in (2, 4, 8, 16, 32, 48, 64)),
    *(f"Standard_D{n}_v3" for n in (2, 4, 8, 16, 32, 48, 64)),
    *(f"Standard_D{n}as_v4" for n in (2, 4, 8, 16, 32, 48, 64, 96)),
    *(f"Standard_D{n}ds_v4" for n in (2, 4, 8, 16, 32, 48, 64)),
    *(f"Standard_D{n}ds_v5" for n in (2, 4, 8, 16, 32, 48, 64, 96)),
    *(f"Standard_E{n}s_v3" for n in (2, 4, 8, 16, 20, 32, 48, 64)),
    *(f"Standard_E{n}ds_v4" for n in (2, 4, 8, 16, 20, 32, 48, 64, 80)),
    *(f"Standard_F{n}s_v2" for n in (2, 4, 8, 16, 32, 48, 64, 72)),
    "Standard_HB120rs_v3",
]
_GPU: dict[str, tuple[str, int]] = {
    "Standard_NC6s_v3": ("V100", 1),
    "Standard_NC12s_v3": ("V100", 2),
    "Standard_NC24s_v3": ("V100", 4),
    "Standard_NC24rs_v3": ("V100", 4),
    "Standard_ND40rs_v2": ("V100", 8),
    "Standard_NC4as_T4_v3": ("T4", 1),
    "Standard_NC8as_T4_v3": ("T4", 1),
    "Standard_NC16as_T4_v3": ("T4", 1),
    "Standard_NC64as_T4_v3": ("T4", 4),
    "Standard_NC24ads_A100_v4": ("A100", 1),
    "Standard_NC48ads_A100_v4": ("A100", 2),
    "Standard_NC96ads_A100_v4": ("A100", 4),
    "Standard_ND96asr_v4": ("A100", 8),
    "Standard_ND96amsr_A100_v4": ("A100_80GB", 8),
    "Standard_NV6ads_A10_v5": ("A10", 1),
    "Standard_NV12ads_A10_v5": ("A10", 1),
    "Standard_NV18ads_A10_v5": ("A10", 1),
    "Standard_NV36ads_A10_v5": ("A10", 1),
    "Standard_NV72ads_A10_v5": ("A10", 2),
    "Standard_NC40ads_H100_v5": ("H100", 1),
    "Standard_NC80adis_H100_v5": ("H100", 2),
    "Standard_ND96isr_H100_v5": ("H100", 8),
    "Standard_ND96isr_H200_v5": ("H200", 8),
}
INSTANCE_TYPES: dict[str, tuple[str, int]] = {**{s: ("", 0) for s in _CPU}, **_GPU}
_BY_LOWER = {k.lower(): k for k in INSTANCE_TYPES}


def canonical_instance_type(name: str) -> str | None:
    """The size as Azure spells it, or None when Azure ML does not offer it."""
    return _BY_LOWER.get((name or "").lower())
