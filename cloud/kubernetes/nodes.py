"""The cluster's nodes: two by default, any set through ``POST /_fake/nodes``.

A node is given compactly (``name``, ``capacity``, ``labels``, ``taints``, ``unschedulable``,
``ready``) and served as a full ``Node`` (capacity and allocatable, the usual labels, a Ready
condition, node info). By default:

* ``cpu-node-1``: cpu 8, memory 32Gi, pods 110;
* ``gpu-node-1``: cpu 16, memory 64Gi, ``nvidia.com/gpu: 4``, labels
  ``nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB`` and ``nvidia.com/gpu.count: "4"``, taint
  ``nvidia.com/gpu=present:NoSchedule`` (as GKE and AKS taint GPU pools).
"""

from __future__ import annotations

import hashlib
from typing import Any

from cloud.kubernetes.api import k8s_time, new_uid
from cloud.kubernetes.quantities import parse_quantity

GPU = "nvidia.com/gpu"
DEFAULT_NODES: list[dict[str, Any]] = [
    {"name": "cpu-node-1", "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    {
        "name": "gpu-node-1",
        "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110", GPU: "4"},
        "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
        "taints": [{"key": GPU, "value": "present", "effect": "NoSchedule"}],
    },
]
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def node_object(spec: dict[str, Any], now: float) -> dict[str, Any]:
    """The Node a compact spec describes; ValueError naming what is wrong."""
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError('a node needs a "name"')
    capacity = {"pods": "110", "ephemeral-storage": "100Gi", **(spec.get("capacity") or {})}
    for amount in capacity.values():
        parse_quantity(amount)  # ValueError when malformed
    capacity = {k: str(v) for k, v in capacity.items()}
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
    }
    if parse_quantity(capacity.get(GPU, 0)) > 0:
        labels.update({"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": capacity[GPU]})
    labels.update(spec.get("labels") or {})
    taints = [dict(t) for t in spec.get("taints") or []]
    for taint in taints:
        if not taint.get("key") or taint.get("effect") not in _EFFECTS:
            raise ValueError(f"taint {taint}: give a key and an effect of {_EFFECTS}")
    ready = spec.get("ready", True)
    node_spec: dict[str, Any] = {"podCIDR": "10.244.0.0/24", "podCIDRs": ["10.244.0.0/24"]}
    if taints:
        node_spec["taints"] = taints
    if spec.get("unschedulable"):
        node_spec["unschedulable"] = True
    when = k8s_time(now)
    conditions = [
        _condition(
            kind, "False", f"KubeletHasSufficient{what}", f"kubelet has sufficient {text}", when
        )
        for kind, what, text in (
            ("MemoryPressure", "Memory", "memory available"),
            ("DiskPressure", "Disk", "disk space available"),
            ("PIDPressure", "PID", "PID available"),
        )
    ]
    conditions.append(
        _condition("Ready", "True", "KubeletReady", "kubelet is posting ready status", when)
        if ready
        else _condition(
            "Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.", when
        )
    )
    digest = hashlib.sha256(name.encode()).hexdigest()
    return {
        "metadata": {
            "name": name,
            "uid": new_uid(),
            "creationTimestamp": when,
            "labels": labels,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": node_spec,
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": digest[:32],
                "systemUUID": digest[32:64],
                "bootID": new_uid(),
                "kernelVersion": "6.1.0-stepop",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kubeletVersion": "v1.31.0",
                "kubeProxyVersion": "v1.31.0",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": [],
        },
    }


def _condition(kind: str, status: str, reason: str, message: str, when: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "lastHeartbeatTime": when,
        "lastTransitionTime": when,
        "reason": reason,
        "message": message,
    }


def is_ready(node: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in node["status"].get("conditions") or []
    )
