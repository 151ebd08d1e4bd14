"""Vertex AI custom-training machine types and their accelerator pairings (for refusals).

Compiled from the public pages "Configure compute resources for custom training" and the
Compute Engine GPU pages; the pairings were not re-verified one by one against a live project,
so when a real refusal disagrees, fix the entry here. The fake refuses what is not here, so a
typo in the product's catalog (``a2-highgpu-1`` for ``a2-highgpu-1g``, T4 on ``a2``, 3 x V100) fails
against the fake as it would in production. Accelerator-optimized families come with a fixed
GPU type and count; ``n1-*`` takes attachable GPUs in the counts Compute Engine allows, up to a
vCPU ceiling per (GPU, count).
"""

from __future__ import annotations

import re

# Machine types without attachable GPUs (family -> vCPU counts offered for training).
_CPU_FAMILIES: dict[str, tuple[int, ...]] = {
    "e2-standard": (4, 8, 16, 32),
    "e2-highmem": (2, 4, 8, 16),
    "e2-highcpu": (16, 32),
    "n2-standard": (4, 8, 16, 32, 48, 64, 80),
    "n2-highmem": (2, 4, 8, 16, 32, 48, 64, 80),
    "n2-highcpu": (16, 32, 48, 64, 80, 96),
    "n2d-standard": (4, 8, 16, 32, 48, 64, 80, 96, 128, 224),
    "c2-standard": (4, 8, 16, 30, 60),
    "c2d-standard": (4, 8, 16, 32, 56, 112),
    "c3-standard": (4, 8, 22, 44, 88, 176),
    "m1-ultramem": (40, 80, 160),
    "m1-megamem": (96,),
}
# n1 machines take attachable GPUs (NVIDIA_TESLA_T4/V100/P100/P4).
_N1_FAMILIES: dict[str, tuple[int, ...]] = {
    "n1-standard": (4, 8, 16, 32, 64, 96),
    "n1-highmem": (2, 4, 8, 16, 32, 64, 96),
    "n1-highcpu": (16, 32, 64, 96),
}
# Accelerator-optimized machine types: (accelerator, count) they come with.
FIXED_GPU: dict[str, tuple[str, int]] = {
    "a2-highgpu-1g": ("NVIDIA_TESLA_A100", 1),
    "a2-highgpu-2g": ("NVIDIA_TESLA_A100", 2),
    "a2-highgpu-4g": ("NVIDIA_TESLA_A100", 4),
    "a2-highgpu-8g": ("NVIDIA_TESLA_A100", 8),
    "a2-megagpu-16g": ("NVIDIA_TESLA_A100", 16),
    "a2-ultragpu-1g": ("NVIDIA_A100_80GB", 1),
    "a2-ultragpu-2g": ("NVIDIA_A100_80GB", 2),
    "a2-ultragpu-4g": ("NVIDIA_A100_80GB", 4),
    "a2-ultragpu-8g": ("NVIDIA_A100_80GB", 8),
    "a3-highgpu-1g": ("NVIDIA_H100_80GB", 1),
    "a3-highgpu-2g": ("NVIDIA_H100_80GB", 2),
    "a3-highgpu-4g": ("NVIDIA_H100_80GB", 4),
    "a3-highgpu-8g": ("NVIDIA_H100_80GB", 8),
    "a3-megagpu-8g": ("NVIDIA_H100_MEGA_80GB", 8),
    "a3-ultragpu-8g": ("NVIDIA_H200_141GB", 8),
    "a4-highgpu-8g": ("NVIDIA_B200", 8),
    "g2-standard-4": ("NVIDIA_L4", 1),
    "g2-standard-8": ("NVIDIA_L4", 1),
    "g2-standard-12": ("NVIDIA_L4", 1),
    "g2-standard-16": ("NVIDIA_L4", 1),
    "g2-standard-24": ("NVIDIA_L4", 2),
    "g2-standard-32": ("NVIDIA_L4", 1),
    "g2-standard-48": ("NVIDIA_L4", 4),
    "g2-standard-96": ("NVIDIA_L4", 8),
}
# TPU machine types: (accelerator, count); cloud-tpu takes either TPU_V2 or TPU_V3 (8 cores).
FIXED_TPU: dict[str, tuple[str, int]] = {
    "cloud-tpu": ("TPU_V2", 8),
    "ct5lp-hightpu-1t": ("TPU_V5_LITEPOD", 1),
    "ct5lp-hightpu-4t": ("TPU_V5_LITEPOD", 4),
    "ct5lp-hightpu-8t": ("TPU_V5_LITEPOD", 8),
}
# Attachable GPUs on n1: count -> largest n1 vCPU count allowed with it.
N1_GPUS: dict[str, dict[int, int]] = {
    "NVIDIA_TESLA_T4": {1: 48, 2: 48, 4: 96},
    "NVIDIA_TESLA_V100": {1: 12, 2: 24, 4: 48, 8: 96},
    "NVIDIA_TESLA_P100": {1: 16, 2: 32, 4: 96},
    "NVIDIA_TESLA_P4": {1: 24, 2: 48, 4: 96},
}

MACHINE_TYPES: dict[str, int] = {}  # machine type -> vCPUs (0 when not meaningful)
for _fam, _sizes in {**_CPU_FAMILIES, **_N1_FAMILIES}.items():
    for _n in _sizes:
        MACHINE_TYPES[f"{_fam}-{_n}"] = _n
for _mt in FIXED_GPU:
    MACHINE_TYPES[_mt] = int(re.sub(r"\D", "", _mt.split("-")[-1]) or 0)
for _mt in FIXED_TPU:
    MACHINE_TYPES[_mt] = 0


def check_machine(machine_type: str, accelerator: str, count: int) -> str | None:
    """None when Vertex would accept the triple, else the refusal message.

    ``accelerator`` is the enum name ("" or ACCELERATOR_TYPE_UNSPECIFIED for none).
    """
    if accelerator == "ACCELERATOR_TYPE_UNSPECIFIED":
        accelerator = ""
    if machine_type not in MACHINE_TYPES:
        return f'Machine type "{machine_type}" is not supported.'
    if count < 0:
        return f"accelerator_count must not be negative, got {count}."
    if accelerator and count == 0:
        return (
            f'Accelerator "{accelerator}" requires accelerator_count > 0 '
            f'for machine type "{machine_type}".'
        )
    if count and not accelerator:
        return f"accelerator_count is {count} but no accelerator_type is set."
    fixed = FIXED_GPU.get(machine_type) or FIXED_TPU.get(machine_type)
    if fixed is not None:
        want_acc, want_n = fixed
        if (machine_type, accelerator) == ("cloud-tpu", "TPU_V3"):
            want_acc = accelerator
        if not accelerator:
            # Vertex requires the pairing to be spelled out for GPU machine types.
            return (
                f'Machine type "{machine_type}" requires accelerator_type "{want_acc}" '
                f"with accelerator_count {want_n}."
            )
        if accelerator != want_acc:
            return (
                f'Accelerator "{accelerator}" is not supported for machine type '
                f'"{machine_type}". Use "{want_acc}".'
            )
        if count != want_n:
            return (
                f'Accelerator count {count} of "{accelerator}" is not supported for machine '
                f'type "{machine_type}". Use {want_n}.'
            )
        return None
    if not accelerator:
        return None
    if not machine_type.startswith("n1-"):
        return f'Accelerator "{accelerator}" is not supported for machine type "{machine_type}".'
    counts = N1_GPUS.get(accelerator)
    if counts is None:
        return f'Accelerator "{accelerator}" is not supported for machine type "{machine_type}".'
    if count not in counts:
        allowed = ", ".join(str(c) for c in counts)
        return (
            f'Accelerator count {count} of "{accelerator}" is not supported. Use one of: {allowed}.'
        )
    if MACHINE_TYPES[machine_type] > counts[count]:
        return (
            f'Machine type "{machine_type}" has too many vCPUs for {count} x "{accelerator}" '
            f"(at most {counts[count]} vCPUs)."
        )
    return None
