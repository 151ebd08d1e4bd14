"""The control loop that makes the cluster move: one thread, one pass every ``tick`` seconds.

Each pass, under the lock: Kueue admits what it can (:mod:`cloud.kubernetes.kueue`), the job
controller syncs every Job (:mod:`cloud.kubernetes.jobcontroller`) and deletes the finished
ones whose ``ttlSecondsAfterFinished`` has passed (with Foreground propagation, as the TTL
controller does), the scheduler places pending pods (:mod:`cloud.kubernetes.scheduler`) and
starts the kubelet on them (:mod:`cloud.kubernetes.kubelet`), and the garbage collector runs
(:mod:`cloud.kubernetes.deletion`) when anything changed.

Scheduling: pods are placed oldest first, each on the least loaded node that fits. One that
fits nowhere stays Pending with ``PodScheduled`` False (``Unschedulable``, the scheduler's
message) and a ``FailedScheduling`` event (Warning, ``default-scheduler``) each time the message
changes, and is placed as soon as room frees up. A ``provisioning_delay`` fault keeps new pods
unscheduled (Pending, no condition yet) for its seconds.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from typing import Any

from cloud.kubernetes.api import JOBS, NODES, PODS
from cloud.kubernetes.conditions import set_condition
from cloud.kubernetes.events import NORMAL, WARNING
from cloud.kubernetes.jobcontroller import JobController, is_finished, pods_by_owner
from cloud.kubernetes.kubelet import Kubelet
from cloud.kubernetes.kueue import Kueue
from cloud.kubernetes.podspec import JOB_TRACKING, is_terminal
from cloud.kubernetes.scheduler import place

SCHEDULER = "default-scheduler"


class Cluster(JobController, Kubelet, Kueue):
    """The loop over the controllers, the scheduler and the collector."""

    def start_cluster(self) -> None:
        self.unschedulable: dict[str, str] = {}  # pod uid -> the message last reported
        self.first_seen: dict[str, float] = {}  # pod uid -> when the scheduler first saw it
        self._collected_at = -1  # the store's resourceVersion at the last collection
        self._loop_thread = threading.Thread(
            target=self._loop, daemon=True, name="kubernetes-controllers"
        )
        self._loop_thread.start()

    def stop_cluster(self) -> None:
        self.stopping.set()
        self._loop_thread.join(timeout=10)

    def _loop(self) -> None:
        while not self.stopping.wait(self.tick):
            try:
                with self.lock:
                    self.reconcile()
            except Exception:  # a bug of the fake must not stop the cluster
                traceback.print_exc(file=sys.stderr)

    def reconcile(self) -> None:
        """One pass (caller holds the lock)."""
        now = time.time()
        pods = self.store.items(PODS.resource)
        grouped = pods_by_owner(pods)
        jobs = self.store.items(JOBS.resource)
        for job in jobs:
            if self._settled(job, grouped):
                self._expire(job, now)
                continue
            self.sync_job(job, grouped)
        self.release_orphans(pods, {j["metadata"]["uid"] for j in jobs})
        self.admit_jobs()
        self._schedule(now)
        if self.store.rv != self._collected_at:
            seen = self.store.rv  # what the collector changes is looked at again next pass
            self.collect_garbage()
            self._forget_gone()
            self._collected_at = seen

    def _settled(self, job: dict[str, Any], grouped: dict[str, list[dict[str, Any]]]) -> bool:
        """A finished Job with nothing left to count: only its TTL may still act."""
        if not is_finished(job) or job["metadata"].get("deletionTimestamp"):
            return False
        return all(
            is_terminal(p) and JOB_TRACKING not in (p["metadata"].get("finalizers") or [])
            for p in grouped.get(job["metadata"]["uid"], [])
        )

    def _expire(self, job: dict[str, Any], now: float) -> None:
        """Delete a finished Job whose ``ttlSecondsAfterFinished`` has passed."""
        track = self.tracks.get(job["metadata"]["uid"])
        if track is None:
            return
        if track.finished_at is None:
            track.finished_at = now
        ttl = job["spec"].get("ttlSecondsAfterFinished")
        if ttl is not None and now >= track.finished_at + ttl:
            self.delete_object(JOBS, job, "Foreground")

    def _schedule(self, now: float) -> None:
        pods = self.store.items(PODS.resource)
        pending = [
            p
            for p in pods
            if not p["spec"].get("nodeName")
            and not p["metadata"].get("deletionTimestamp")
            and not is_terminal(p)
        ]
        if not pending:
            return
        nodes = self.store.items(NODES.resource)
        delay = self.faults.seconds("provisioning_delay")
        for pod in sorted(pending, key=lambda p: int(p["metadata"]["resourceVersion"])):
            meta = pod["metadata"]
            seen = self.first_seen.setdefault(meta["uid"], now)
            if now - seen < delay:
                continue
            node, message = place(pod["spec"], nodes, pods)
            if node is None:
                self._unschedulable(pod, message, now)
                continue
            bound = self.store.mutate(
                PODS.resource, meta["namespace"], meta["name"], lambda p, n=node: _bind(p, n, now)
            )
            if bound is None:
                continue
            self.event(
                PODS,
                bound,
                NORMAL,
                "Scheduled",
                f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}",
                SCHEDULER,
            )
            self.unschedulable.pop(meta["uid"], None)
            self.start_pod(bound)
            pods = self.store.items(PODS.resource)

    def _unschedulable(self, pod: dict[str, Any], message: str, now: float) -> None:
        meta = pod["metadata"]
        self.store.mutate(
            PODS.resource,
            meta["namespace"],
            meta["name"],
            lambda p: set_condition(
                p["status"].setdefault("conditions", []),
                "PodScheduled",
                "False",
                "Unschedulable",
                message,
                now,
            ),
        )
        if self.unschedulable.get(meta["uid"]) != message:
            self.unschedulable[meta["uid"]] = message
            self.event(PODS, pod, WARNING, "FailedScheduling", message, SCHEDULER)

    def _forget_gone(self) -> None:
        """Drop what is kept about pods and Jobs no longer stored (their logs go with them)."""
        live = {o["metadata"]["uid"] for r in (PODS, JOBS) for o in self.store.items(r.resource)}
        for table in (self.pods, self.tracks, self.unschedulable, self.first_seen):
            for uid in [u for u in table if u not in live]:
                runtime = self.pods.get(uid)
                if table is self.pods and runtime is not None and not runtime.log.ended:
                    continue  # its kubelet thread is still stopping the container
                del table[uid]


def _bind(pod: dict[str, Any], node: str, now: float) -> None:
    pod["spec"]["nodeName"] = node
    set_condition(pod["status"].setdefault("conditions", []), "PodScheduled", "True", now=now)
