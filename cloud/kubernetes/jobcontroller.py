"""The job controller: a Job's pods and status, as kube-controller-manager keeps them.

Each pass over a Job (:meth:`JobController.sync_job`, under the lock):

* counts its pods once each as they end (a pod deleted before it succeeded counts as failed,
  unless the Job deleted it while suspending), then lifts their ``job-tracking`` finalizer;
  a pod matching a ``podFailurePolicy`` rule ``Ignore`` is not counted, ``FailJob`` fails the Job;
* suspended (``spec.suspend``): no pods (running ones are deleted), ``Suspended`` True
  (``JobSuspended``) and a ``Suspended`` event; resumed: ``Suspended`` False (``JobResumed``),
  a ``Resumed`` event and a new ``status.startTime``, so ``activeDeadlineSeconds`` counts only
  time not suspended;
* fails the Job when its failed pods exceed ``backoffLimit`` (``BackoffLimitExceeded``, "Job has
  reached the specified backoff limit") or it has been active longer than
  ``activeDeadlineSeconds`` (``DeadlineExceeded``, "Job was active longer than specified
  deadline"): ``FailureTarget`` at once, pods deleted, ``Failed`` once none is left;
* succeeds when ``completions`` pods (Indexed: every index) succeeded: ``SuccessCriteriaMet``,
  then ``Complete`` and ``completionTime`` once no pod runs (``CompletionsReached``, "Reached
  expected number of succeeded pods"), a ``Completed`` event;
* otherwise creates pods up to ``parallelism`` (Indexed: one per index not done), after a
  back-off of 1 s doubling per failure (up to 60 s) once a pod failed; a pod the namespace's
  quota refuses (``quota.py``) is a ``FailedCreate`` warning event, tried again each pass;
* keeps ``status``: ``active``, ``ready``, ``succeeded``, ``failed``, ``terminating``,
  ``startTime``, ``completionTime``, ``completedIndexes``, ``uncountedTerminatedPods``.
"""

from __future__ import annotations

import copy
import time
from typing import Any

from cloud.kubernetes import quota
from cloud.kubernetes.api import JOBS, PODS, k8s_time
from cloud.kubernetes.conditions import (
    failure_policy_action,
    index_ranges,
    is_true,
    set_condition,
)
from cloud.kubernetes.deletion import Deletion
from cloud.kubernetes.events import NORMAL, WARNING
from cloud.kubernetes.podspec import (
    JOB_TRACKING,
    completion_index,
    is_terminal,
    owner_uid,
    pod_for_job,
)
from cloud.kubernetes.state import JobTrack

RETRY_BACKOFF = (1.0, 60.0)
BACKOFF_LIMIT = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
DEADLINE = ("DeadlineExceeded", "Job was active longer than specified deadline")
COMPLETED = ("CompletionsReached", "Reached expected number of succeeded pods")
COMPONENT = "job-controller"


def is_finished(job: dict[str, Any]) -> bool:
    conditions = job.get("status", {}).get("conditions")
    return is_true(conditions, "Complete") or is_true(conditions, "Failed")


class JobController(Deletion):
    """Keeps each Job's pods and status; the loop in :mod:`cloud.kubernetes.cluster` calls it."""

    def _job_event(self, job: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.event(JOBS, job, type_, reason, message, COMPONENT)

    def sync_job(self, job: dict[str, Any], pods_by_owner: dict[str, list[dict[str, Any]]]) -> None:
        """One pass over ``job`` (a stored Job; caller holds the lock)."""
        meta, spec = job["metadata"], job["spec"]
        track = self.tracks.setdefault(meta["uid"], JobTrack())
        pods = pods_by_owner.get(meta["uid"], [])
        now = time.time()
        policy_failure = self._count(job, track, pods, now)
        updated = copy.deepcopy(job)
        status = updated["status"]
        conditions = status.setdefault("conditions", [])
        active = [
            p for p in pods if not is_terminal(p) and not p["metadata"].get("deletionTimestamp")
        ]
        terminating = [
            p for p in pods if not is_terminal(p) and p["metadata"].get("deletionTimestamp")
        ]
        if not meta.get("deletionTimestamp") and not is_finished(job):
            if spec.get("suspend"):
                self._suspend(job, track, active, conditions, now)
                active = []
            else:
                self._resume(job, status, conditions, now)
                active = self._progress(
                    job, track, active, terminating, conditions, status, policy_failure, now
                )
        self._write_status(updated, track, active, terminating)
        if not conditions:
            del status["conditions"]
        self.store.put(JOBS.resource, updated)

    def _count(
        self, job: dict[str, Any], track: JobTrack, pods: list[dict[str, Any]], now: float
    ) -> tuple[str, str] | None:
        """Count the pods that ended; a ``FailJob`` rule's (reason, message) if one matched."""
        failure = None
        indexed = job["spec"].get("completionMode") == "Indexed"
        for pod in pods:
            uid = pod["metadata"]["uid"]
            phase = pod["status"].get("phase")
            deleted = bool(pod["metadata"].get("deletionTimestamp"))
            counted = uid in track.succeeded or uid in track.failed or uid in track.not_counted
            if not counted and phase == "Succeeded":
                track.succeeded.add(uid)
                index = completion_index(pod)
                if indexed and index is not None:
                    track.indexes.add(index)
            elif not counted and (
                phase == "Failed" or (deleted and not pod["spec"].get("nodeName"))
            ):
                action = failure_policy_action(job, pod)
                if action is not None and action[0] == "Ignore":
                    track.not_counted.add(uid)
                else:
                    track.failed.add(uid)
                    if action is not None and action[0] == "FailJob":
                        failure = ("PodFailurePolicy", action[1])
                    wait = RETRY_BACKOFF[0] * 2 ** (len(track.failed) - 1)
                    track.retry_at = now + min(wait, RETRY_BACKOFF[1])
            accounted = uid in track.succeeded or uid in track.failed or uid in track.not_counted
            if accounted and JOB_TRACKING in (pod["metadata"].get("finalizers") or []):
                self.store.mutate(
                    PODS.resource,
                    pod["metadata"]["namespace"],
                    pod["metadata"]["name"],
                    _without_tracking,
                )
        return failure

    def release_orphans(self, pods: list[dict[str, Any]], jobs: set[str]) -> None:
        """Lift the ``job-tracking`` finalizer of pods whose Job is gone (orphaned or deleted):
        nothing is left to count them (caller holds the lock)."""
        for pod in pods:
            meta = pod["metadata"]
            if JOB_TRACKING in (meta.get("finalizers") or []) and owner_uid(pod) not in jobs:
                self.store.mutate(PODS.resource, meta["namespace"], meta["name"], _without_tracking)

    def _suspend(
        self,
        job: dict[str, Any],
        track: JobTrack,
        active: list[dict[str, Any]],
        conditions: list[dict[str, Any]],
        now: float,
    ) -> None:
        for pod in active:
            track.not_counted.add(pod["metadata"]["uid"])
            self.delete_pod(pod, None)
            self._job_event(
                job, NORMAL, "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}"
            )
        if set_condition(
            conditions, "Suspended", "True", "JobSuspended", "Job suspended", now, probe=True
        ):
            self._job_event(job, NORMAL, "Suspended", "Job suspended")

    def _resume(
        self,
        job: dict[str, Any],
        status: dict[str, Any],
        conditions: list[dict[str, Any]],
        now: float,
    ) -> None:
        was_suspended = is_true(conditions, "Suspended")
        if was_suspended:
            set_condition(
                conditions, "Suspended", "False", "JobResumed", "Job resumed", now, probe=True
            )
            self._job_event(job, NORMAL, "Resumed", "Job resumed")
        if was_suspended or not status.get("startTime"):
            status["startTime"] = k8s_time(now)
            self.tracks[job["metadata"]["uid"]].started_at = now

    def _progress(
        self,
        job: dict[str, Any],
        track: JobTrack,
        active: list[dict[str, Any]],
        terminating: list[dict[str, Any]],
        conditions: list[dict[str, Any]],
        status: dict[str, Any],
        policy_failure: tuple[str, str] | None,
        now: float,
    ) -> list[dict[str, Any]]:
        """Fail, succeed or create pods; the pods still active after it."""
        spec = job["spec"]
        if not is_true(conditions, "FailureTarget"):
            deadline = spec.get("activeDeadlineSeconds")
            failure = policy_failure
            if failure is None and len(track.failed) > int(spec.get("backoffLimit", 6)):
                failure = BACKOFF_LIMIT
            if failure is None and deadline is not None and now - track.started_at >= deadline:
                failure = DEADLINE
            if failure is not None:
                set_condition(conditions, "FailureTarget", "True", *failure, now, probe=True)
                self._job_event(job, WARNING, failure[0], failure[1])
        if is_true(conditions, "FailureTarget"):
            self._delete_all(job, active)
            if not active and not terminating:
                target = next(c for c in conditions if c["type"] == "FailureTarget")
                set_condition(
                    conditions,
                    "Failed",
                    "True",
                    target["reason"],
                    target["message"],
                    now,
                    probe=True,
                )
            return []
        if self._succeeded(job, track, active):
            set_condition(conditions, "SuccessCriteriaMet", "True", *COMPLETED, now, probe=True)
            self._delete_all(job, active)
            if not active and not terminating:
                set_condition(conditions, "Complete", "True", *COMPLETED, now, probe=True)
                status["completionTime"] = k8s_time(now)
                self._job_event(job, NORMAL, "Completed", "Job completed")
            return []
        if now >= track.retry_at:
            active = active + self._create_pods(job, track, active)
        return active

    @staticmethod
    def _succeeded(job: dict[str, Any], track: JobTrack, active: list[dict[str, Any]]) -> bool:
        spec = job["spec"]
        completions = spec.get("completions")
        if spec.get("completionMode") == "Indexed":
            return len(track.indexes) >= completions
        if completions is None:  # a work queue: one success and nothing left running
            return bool(track.succeeded) and not active
        return len(track.succeeded) >= completions

    def _create_pods(
        self, job: dict[str, Any], track: JobTrack, active: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        spec = job["spec"]
        room = int(spec.get("parallelism", 1)) - len(active)
        if spec.get("completionMode") == "Indexed":
            busy = {completion_index(p) for p in active}
            wanted: list[int | None] = [
                i for i in range(spec["completions"]) if i not in track.indexes and i not in busy
            ][: max(room, 0)]
        else:
            completions = spec.get("completions")
            if completions is None:  # a work queue: no new pod once one has succeeded
                left = 0 if track.succeeded else room
            else:
                left = min(room, completions - len(track.succeeded) - len(active))
            wanted = [None] * max(left, 0)
        created = []
        for index in wanted:
            pod = pod_for_job(job, index)
            refused = quota.refusal(self.store, job["metadata"]["namespace"], pod)
            if refused:  # as the real controller: an event, and another try next pass
                self._job_event(job, WARNING, "FailedCreate", f"Error creating: {refused}")
                break
            pod = self.store.add(PODS.resource, pod)
            self._job_event(
                job, NORMAL, "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}"
            )
            created.append(pod)
        return created

    def _delete_all(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        for pod in pods:
            self.delete_pod(pod, None)
            self._job_event(
                job, NORMAL, "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}"
            )

    def _write_status(
        self,
        job: dict[str, Any],
        track: JobTrack,
        active: list[dict[str, Any]],
        terminating: list[dict[str, Any]],
    ) -> None:
        status = job["status"]
        counts = {
            "active": len(active),
            "ready": sum(is_true(p["status"].get("conditions"), "Ready") for p in active),
            "succeeded": len(track.succeeded),
            "failed": len(track.failed),
            "terminating": len(terminating),
        }
        for field, value in counts.items():
            if value or field in ("ready", "terminating"):
                status[field] = value
            else:
                status.pop(field, None)
        status["uncountedTerminatedPods"] = {}
        if job["spec"].get("completionMode") == "Indexed":
            if track.indexes:
                status["completedIndexes"] = index_ranges(track.indexes)
            else:
                status.pop("completedIndexes", None)


def _without_tracking(pod: dict[str, Any]) -> None:
    left = [f for f in pod["metadata"].get("finalizers") or [] if f != JOB_TRACKING]
    if left:
        pod["metadata"]["finalizers"] = left
    else:
        pod["metadata"].pop("finalizers", None)


def pods_by_owner(pods: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Pods grouped by the uid of their controlling owner."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        uid = owner_uid(pod)
        if uid is not None:
            grouped.setdefault(uid, []).append(pod)
    return grouped
