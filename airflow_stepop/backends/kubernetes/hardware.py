"""``ResourceSettings`` as a pod asks for it: container requests and limits, and the nodes whose
GPU model it names.

A cluster has no machine types to choose between: the scheduler places the pod on a node with
room for its requests. So ``cpu_count`` and ``memory`` become requests (memory also the limit:
a step over it is OOMKilled, as on a machine of that size; no CPU limit, which would throttle a
step that could use an idle core), GPUs an extended resource (``nvidia.com/gpu`` by default)
requested and limited alike, as device plugins require, and ``gpu_type`` a required node
affinity on the label that names each node's GPU model, with the values the usual labellers
give that model (the table below: docs/kubernetes.md shows it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_stepop.catalog.resolver import normalize_gpu
from airflow_stepop.setting_values import SettingsError

if TYPE_CHECKING:
    from airflow_stepop.settings import ResourceSettings

# NVIDIA GPU feature discovery (the GPU operator's labeller, EKS, most on-premise clusters).
GFD_LABEL = "nvidia.com/gpu.product"
# GKE's own GPU node label.
GKE_LABEL = "cloud.google.com/gke-accelerator"
DEFAULT_GPU_LABEL = GFD_LABEL
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"

# Our GPU model names -> the values each labeller gives a node with that GPU.
GPU_PRODUCTS: dict[str, dict[str, tuple[str, ...]]] = {
    GFD_LABEL: {
        "T4": ("Tesla-T4",),
        "P4": ("Tesla-P4",),
        "V100": ("Tesla-V100-SXM2-16GB", "Tesla-V100-SXM2-32GB", "Tesla-V100-PCIE-16GB",
                 "Tesla-V100-PCIE-32GB"),
        "A10": ("NVIDIA-A10",),
        "A10G": ("NVIDIA-A10G",),
        "L4": ("NVIDIA-L4",),
        "L40S": ("NVIDIA-L40S",),
        "A100": ("NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-PCIE-40GB",
                 "NVIDIA-A100-80GB-PCIe"),
        "H100": ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe", "NVIDIA-H100-NVL"),
        "H200": ("NVIDIA-H200", "NVIDIA-H200-141GB-HBM3e"),
        "B200": ("NVIDIA-B200",),
    },
    GKE_LABEL: {
        "T4": ("nvidia-tesla-t4",),
        "P4": ("nvidia-tesla-p4",),
        "V100": ("nvidia-tesla-v100",),
        "L4": ("nvidia-l4",),
        "A100": ("nvidia-tesla-a100", "nvidia-a100-80gb"),
        "H100": ("nvidia-h100-80gb", "nvidia-h100-mega-80gb"),
        "H200": ("nvidia-h200-141gb",),
        "B200": ("nvidia-b200",),
    },
}  # fmt: skip


def gpu_products(owner: str, label: str, gpu_type: str) -> tuple[str, ...]:
    """The node label values of ``gpu_type`` under ``label``; refused when we know none."""
    table = GPU_PRODUCTS.get(label, {})
    wanted = normalize_gpu(gpu_type)
    for name, values in table.items():
        if normalize_gpu(name) == wanted:
            return values
    known = ", ".join(sorted(table)) or "none: it is not a label we know"
    raise SettingsError(
        f"{owner}: ResourceSettings.gpu_type={gpu_type!r} has no value we know for the node "
        f"label {label!r} (the GPU models we map there: {known}). Drop gpu_type and pick the "
        f"nodes yourself with node_selector={{{label!r}: '<the value your nodes carry>'}}, or "
        "set [stepop] kubernetes_gpu_label to the label your cluster's GPU nodes carry."
    )


def _quantity(size: int) -> str:
    """Bytes as a Kubernetes quantity, in the largest binary unit that divides them."""
    for suffix, unit in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def container_resources(resources: ResourceSettings | None, gpu_resource: str) -> dict[str, Any]:
    """The step container's ``resources``: requests and limits (empty: none asked)."""
    if resources is None:
        return {}
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if resources.cpu_count:
        requests["cpu"] = str(resources.cpu_count)
    if resources.memory_bytes:
        requests["memory"] = limits["memory"] = _quantity(resources.memory_bytes)
    if resources.gpu_count:
        requests[gpu_resource] = limits[gpu_resource] = str(resources.gpu_count)
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def gpu_toleration(gpu_resource: str) -> dict[str, str]:
    """The toleration of the taint GPU node pools carry, keyed by the GPU's resource name
    (``nvidia.com/gpu`` on GKE and AKS pools, as the GPU operator's docs suggest): a pod that
    asks for a GPU tolerates it."""
    return {"key": gpu_resource, "operator": "Exists", "effect": "NoSchedule"}


def gpu_affinity(label: str, products: tuple[str, ...]) -> dict[str, Any]:
    """A pod affinity that admits only nodes whose ``label`` is one of ``products``."""
    term = {"matchExpressions": [{"key": label, "operator": "In", "values": list(products)}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term]
    }}}  # fmt: skip


def check_gpu_request(owner: str, resources: ResourceSettings | None, label: str) -> None:
    """At parse: a ``gpu_type`` we cannot place is refused now, not as a pod that never runs."""
    if resources is not None and resources.gpu_type:
        gpu_products(owner, label, resources.gpu_type)
