"""Pods as the API shapes them: the defaults a pod spec gets, a Job's pod made from its
template, and the container statuses the kubelet reports.

A Job's pod (:func:`pod_for_job`) is named ``<job>-<5 chars>`` (Indexed: ``<job>-<i>-<5
chars>``), owned by the Job (``controller: true``), held by the ``batch.kubernetes.io/
job-tracking`` finalizer until the job controller counted it, and labelled ``batch.kubernetes.io/
job-name``, ``job-name``, ``controller-uid``, ``batch.kubernetes.io/controller-uid`` (from the
template). An Indexed Job's pod also gets the label and annotation
``batch.kubernetes.io/job-completion-index``, env ``JOB_COMPLETION_INDEX`` (from the
annotation) and ``hostname: <job>-<i>``.
"""

from __future__ import annotations

import copy
import secrets
from typing import Any

from cloud.kubernetes.api import JOBS, k8s_time, new_uid
from cloud.kubernetes.quantities import qos_class

INDEX = "batch.kubernetes.io/job-completion-index"
JOB_TRACKING = "batch.kubernetes.io/job-tracking"
# the alphabet of generateName suffixes (no vowels, no look-alikes)
_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"
DEFAULT_TOLERATIONS = [
    {
        "key": f"node.kubernetes.io/{what}",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    }
    for what in ("not-ready", "unreachable")
]


def generated_name(base: str) -> str:
    """``generateName`` + 5 random characters, the base cut so the name stays <= 63."""
    return base[:58] + "".join(secrets.choice(_SUFFIX) for _ in range(5))


def pull_policy(image: str) -> str:
    """``Always`` for ``:latest`` or no tag, else ``IfNotPresent`` (the API's default)."""
    last = image.rpartition("/")[2]
    if "@" in last:
        return "IfNotPresent"
    return "Always" if ":" not in last or last.endswith(":latest") else "IfNotPresent"


def pod_spec_defaults(spec: dict[str, Any]) -> None:
    """Fill in what the API defaults in a pod spec (in place)."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        container.setdefault("resources", {})
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("imagePullPolicy", pull_policy(container.get("image", "")))
    for volume in spec.get("volumes") or []:
        if "secret" in volume:
            volume["secret"].setdefault("defaultMode", 0o644)
        if "emptyDir" in volume and volume["emptyDir"] is None:
            volume["emptyDir"] = {}


def pod_for_job(job: dict[str, Any], index: int | None) -> dict[str, Any]:
    """A new pod of ``job`` (for completion ``index`` of an Indexed Job), not yet stored."""
    meta, template = job["metadata"], copy.deepcopy(job["spec"]["template"])
    pod_meta = template.get("metadata") or {}
    labels = dict(pod_meta.get("labels") or {})
    annotations = dict(pod_meta.get("annotations") or {})
    base = f"{meta['name']}-" if index is None else f"{meta['name']}-{index}-"
    spec = template["spec"]
    if index is not None:
        labels[INDEX] = annotations[INDEX] = str(index)
        spec["hostname"] = f"{meta['name']}-{index}"
        for container in spec.get("containers") or []:
            container["env"] = [
                e for e in container.get("env") or [] if e.get("name") != "JOB_COMPLETION_INDEX"
            ]
            container["env"].append(
                {
                    "name": "JOB_COMPLETION_INDEX",
                    "valueFrom": {
                        "fieldRef": {
                            "apiVersion": "v1",
                            "fieldPath": f"metadata.annotations['{INDEX}']",
                        }
                    },
                }
            )
    pod_spec_defaults(spec)
    known = {(t.get("key"), t.get("effect")) for t in spec.get("tolerations") or []}
    spec["tolerations"] = [
        *(spec.get("tolerations") or []),
        *(t for t in DEFAULT_TOLERATIONS if (t["key"], t["effect"]) not in known),
    ]
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("priority", 0)
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    pod_meta = {
        "name": generated_name(base),
        "generateName": base,
        "namespace": meta["namespace"],
        "uid": new_uid(),
        "creationTimestamp": k8s_time(),
        "labels": labels,
        "ownerReferences": [
            {
                "apiVersion": JOBS.api_version,
                "kind": JOBS.kind,
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        "finalizers": [JOB_TRACKING],
    }
    if annotations:
        pod_meta["annotations"] = annotations
    return {
        "metadata": pod_meta,
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": qos_class(spec)},
    }


def owner_uid(obj: dict[str, Any]) -> str | None:
    """The uid of the object's controller (its owning Job, for a pod)."""
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def completion_index(pod: dict[str, Any]) -> int | None:
    value = (pod["metadata"].get("annotations") or {}).get(INDEX)
    return int(value) if value is not None and value.isdigit() else None


def container_status(
    container: dict[str, Any],
    state: dict[str, Any],
    ready: bool = False,
    image_id: str = "",
    container_id: str | None = None,
) -> dict[str, Any]:
    """One ``containerStatuses`` entry."""
    status: dict[str, Any] = {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": image_id,
        "ready": ready,
        "restartCount": 0,
        "started": "running" in state,
        "state": state,
        "lastState": {},
    }
    if container_id:
        status["containerID"] = container_id
    return status


def terminated_state(
    exit_code: int, reason: str, started: float | None, finished: float, message: str | None
) -> dict[str, Any]:
    state: dict[str, Any] = {
        "exitCode": exit_code,
        "reason": reason,
        "startedAt": k8s_time(started) if started else None,
        "finishedAt": k8s_time(finished),
    }
    if message:
        state["message"] = message
    return {"terminated": state}


def is_terminal(pod: dict[str, Any]) -> bool:
    return pod["status"].get("phase") in ("Succeeded", "Failed")
