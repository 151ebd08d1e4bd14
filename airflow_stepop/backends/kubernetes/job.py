"""What a step's Job and its pods say, in the contract's words. Pure functions, unit-tested.

Objects are the API's JSON (camelCase, RFC 3339 times). A Job's own status says whether it
ended (``Complete``/``Failed`` conditions, tested ``== "True"``: the string "False" is truthy)
and why in the Job controller's words (``DeadlineExceeded``, ``BackoffLimitExceeded``); the
pods say what a user needs to hear: the container was ``OOMKilled``, the pod ``Evicted``, its
image cannot be pulled (the kubelet retries for ever: the step fails at once, naming the
image), or no node can take it (the scheduler's message while it waits, a failure after
``schedule_timeout``). A suspended Job waits in Kueue's queue: pending, ``queued``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from airflow_stepop.backends.base import JobStatus, billing_record

# Waiting reasons of a container that will not start without a change by a person.
STUCK_WAITING = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                 "CreateContainerConfigError", "CreateContainerError")  # fmt: skip
# An image pull that will never succeed, in containerd's words (a 429 or a 5xx of the registry
# is retried by the kubelet: that pull fails the step only after the schedule timeout).
_LOST_IMAGE = re.compile(
    r"not found|manifest unknown|unauthorized|denied|no such host|invalid reference", re.I
)


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The object's condition of ``kind`` when its status is "True"."""
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == kind and item.get("status") == "True":
            return item
    return None


CONTAINER = "step"  # the step's container in every pod (``manifest``)
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # the Job controller's label on its pods


def owned_pods(job: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods the Job made: their controller is its uid (a label anyone may set)."""
    uid = (job.get("metadata") or {}).get("uid")
    return [
        pod
        for pod in pods
        if any(
            ref.get("uid") == uid and ref.get("controller")
            for ref in (pod.get("metadata") or {}).get("ownerReferences") or []
        )
    ]


def container_state(pod: dict[str, Any]) -> dict[str, Any]:
    """The step container's state (a sidecar's status may come first: they sort by name)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for status in statuses:
        if status.get("name") == CONTAINER:
            return status.get("state") or {}
    return {}


def pod_failure(pod: dict[str, Any]) -> str | None:
    """Why a pod ended or cannot start, in Kubernetes' words; None when nothing is wrong."""
    status = pod.get("status") or {}
    name = (pod.get("metadata") or {}).get("name", "the pod")
    if status.get("reason") == "Evicted":
        return f"Evicted: pod {name} was evicted from its node: {status.get('message', '')}".strip()
    state = container_state(pod)
    waiting = state.get("waiting") or {}
    if waiting.get("reason") in STUCK_WAITING:
        return f"{waiting['reason']}: {waiting.get('message') or 'the container cannot start'}"
    ended = state.get("terminated") or {}
    if ended.get("reason") == "OOMKilled":
        return (
            f"OOMKilled: the step's container in pod {name} used more memory than its limit "
            "and was killed (exit code 137); ask for more with ResourceSettings(memory=...)"
        )
    if ended and ended.get("exitCode", 0) != 0:
        message = f": {ended['message']}" if ended.get("message") else ""
        return f"{ended.get('reason') or 'Error'}: exit code {ended.get('exitCode')}{message}"
    if status.get("phase") == "Failed":
        return f"{status.get('reason') or 'Failed'}: {status.get('message') or 'the pod failed'}"
    return None


def unschedulable(pod: dict[str, Any]) -> tuple[str, datetime | None] | None:
    """The scheduler's message for a pod no node can take, and since when; else None."""
    for item in (pod.get("status") or {}).get("conditions") or []:
        if item.get("type") == "PodScheduled" and item.get("status") == "False":
            return item.get("message") or "no node fits", parse_time(item.get("lastTransitionTime"))
    return None


NO_PODS = "NoPods"  # the reason of a Job that made no pod in its schedule timeout


def job_status(
    job: dict[str, Any],
    pods: list[dict[str, Any]],
    *,
    schedule_timeout_s: float,
    failed_create: str | None = None,
    now: datetime | None = None,
) -> JobStatus:
    """The Job's state; a failure carries its pods' reason, a finished Job its ``details``.
    ``failed_create``: the message of the Job's last ``FailedCreate`` event, when it has no pod
    (a quota, a service account or a policy the namespace refuses its pods)."""
    now = now or datetime.now(UTC)
    details = job_details(job, pods)
    if condition(job, "Complete") or condition(job, "SuccessCriteriaMet"):
        return JobStatus("succeeded", details=details)
    failed = condition(job, "Failed") or condition(job, "FailureTarget")
    if failed:
        return JobStatus("failed", failure_reason(job, failed, pods), details=details)
    if (job.get("metadata") or {}).get("deletionTimestamp"):
        return JobStatus("running", stopping=True)
    if condition(job, "Suspended") or (job.get("spec") or {}).get("suspend"):
        return JobStatus("pending", queued=True)
    for pod in pods:
        reason = pod_failure(pod)
        if not reason:
            continue
        if reason.split(":", 1)[0] not in STUCK_WAITING:  # the Job controller fails it next
            return JobStatus("failed", reason, details=details)
        # a pod that cannot start waits for ever: the step fails (and its Job is deleted) at
        # once where no retry can help, else after the schedule timeout
        waited = age(pod, now)
        if _LOST_IMAGE.search(reason) or reason.startswith(("InvalidImageName", "CreateC")):
            return JobStatus("failed", reason, details=details, held=True)
        if waited > schedule_timeout_s:
            return JobStatus("failed", f"{reason} (for {waited:.0f} s)", held=True)
        return JobStatus("pending", reason=reason)
    if not pods and failed_create:  # the Job controller tries again: a quota may free up
        return _waiting("FailedCreate", "the Job could make no pod", age(job, now),
                        schedule_timeout_s, failed_create)  # fmt: skip
    if not pods and age(job, now) > schedule_timeout_s:  # the Job controller made none
        return JobStatus(
            "failed",
            f"{NO_PODS}: the Job made no pod in {age(job, now):.0f} s ([stepop] "
            f"kubernetes_schedule_timeout is {schedule_timeout_s:g} s): its events say why "
            "(FailedCreate: a service account, priority class or quota the namespace refuses; "
            f"kubectl describe job {(job.get('metadata') or {}).get('name', '')})",
            held=True,
        )
    waits = [found for pod in pods if (found := unschedulable(pod))]
    if waits:
        message, since = waits[0]
        waited = (now - since).total_seconds() if since else 0.0
        return _waiting("Unschedulable", "no node could take the step's pod", waited,
                        schedule_timeout_s, message)  # fmt: skip
    phases = [(pod.get("status") or {}).get("phase") for pod in pods]
    if "Running" in phases or "Succeeded" in phases:
        return JobStatus("running")
    return JobStatus("pending")


def _waiting(reason: str, what: str, waited: float, timeout_s: float, message: str) -> JobStatus:
    """Pending in the cluster's words; failed (held: its Job is deleted) once it has waited past
    the schedule timeout."""
    if waited > timeout_s:
        return JobStatus(
            "failed",
            f"{reason}: {what} for {waited:.0f} s ([stepop] kubernetes_schedule_timeout is "
            f"{timeout_s:g} s): {message}",
            held=True,
        )
    return JobStatus("pending", reason=f"{reason}: {message}")


def event_time(event: dict[str, Any]) -> datetime:
    """An Event's last time: the latest of a repeated event, else when it happened (the
    events.k8s.io ``eventTime``, to the microsecond) or was made; the epoch when none says."""
    meta = event.get("metadata") or {}
    text = event.get("lastTimestamp") or event.get("eventTime") or meta.get("creationTimestamp")
    try:
        return parse_time(text) or datetime.fromtimestamp(0, UTC)
    except ValueError:
        return datetime.fromtimestamp(0, UTC)


def age(obj: dict[str, Any], now: datetime | None = None) -> float:
    """Seconds since the object's creation (0 when it does not say)."""
    created = parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
    return ((now or datetime.now(UTC)) - created).total_seconds() if created else 0.0


def failure_reason(job: dict[str, Any], failed: dict[str, Any], pods: list[dict[str, Any]]) -> str:
    """The Job controller's reason, then what its pods say (the first that says anything)."""
    reason = failed.get("reason") or "Failed"
    if reason == "DeadlineExceeded":
        limit = (job.get("spec") or {}).get("activeDeadlineSeconds")
        return (
            f"DeadlineExceeded: the Job ran longer than its max_runtime "
            f"(activeDeadlineSeconds={limit}) and its pods were stopped"
        )
    for pod in pods:
        said = pod_failure(pod)
        if said:
            return said
    return f"{reason}: {failed.get('message') or 'the Job failed'}"


def _seconds(start: str | None, end: str | None) -> float:
    began, ended = parse_time(start), parse_time(end)
    return max(0.0, (ended - began).total_seconds()) if began and ended else 0.0


def job_details(job: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any]:
    """Small facts of a Job: its pods' nodes, their run time and exit codes (for billing).
    A container's times are to the second: one that ran counts one second at least."""
    seconds, nodes, exit_codes = 0.0, [], []
    for pod in pods:
        ended = container_state(pod).get("terminated") or {}
        if ended.get("startedAt"):
            ran = _seconds(ended.get("startedAt"), ended.get("finishedAt"))
            seconds = max(seconds, ran, 1.0)
        if (pod.get("spec") or {}).get("nodeName"):
            nodes.append(pod["spec"]["nodeName"])
        if "exitCode" in ended:
            exit_codes.append(ended["exitCode"])
    spec = job.get("spec") or {}
    container = ((spec.get("template") or {}).get("spec") or {}).get("containers", [{}])[0]
    return {
        "job_name": (job.get("metadata") or {}).get("name"),
        "pods": int(spec.get("parallelism") or 1),
        "nodes": sorted(set(nodes)),
        "run_seconds": round(seconds, 3),
        "exit_codes": exit_codes,
        "limits": (container.get("resources") or {}).get("limits") or {},
    }


def billing(details: dict[str, Any]) -> dict[str, Any] | None:
    """What the step used: its pods' run time on the cluster's own nodes, no price (the
    cluster's owner pays for its nodes whether a step runs or not)."""
    if not details.get("run_seconds"):
        return None
    return billing_record(
        job_name=details.get("job_name"),
        machine=", ".join(details.get("nodes") or []) or "unknown node",
        count=int(details.get("pods") or 1),
        billable_seconds=float(details["run_seconds"]),
        spot=False,
        price_per_hour=None,
        catalog_date=None,
        limits=details.get("limits") or {},
    )
