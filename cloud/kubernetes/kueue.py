"""Kueue, minimal: queues that admit suspended Jobs when their quota allows.

A Job labelled ``kueue.x-k8s.io/queue-name: <queue>`` is suspended at create (Kueue's
webhook) and waits. When the LocalQueue exists in the Job's namespace and its quota has room
(its GPUs: ``parallelism`` x the pod's ``nvidia.com/gpu`` requests, against the GPUs of the
Jobs it admitted that have not finished; and at most ``max_jobs`` of them), it is admitted:
``spec.suspend`` becomes false and the Job gets the event ``Started: Admitted by clusterQueue
<cluster queue>``. Jobs are admitted oldest first, a Job that does not fit letting later ones
that do pass (BestEffortFIFO). A Job for a queue that does not exist stays suspended. No
Workload objects are served, and flavors' node selectors are not injected.

Queues come from ``POST /_fake/queues`` (``{"queues": {"<name>": {"gpus": 4, "max_jobs":
null, "namespaces": ["default", "stepop"], "cluster_queue": "cluster-queue"}}}``, replacing
them all; ``gpus`` null: no GPU limit). By default ``user-queue`` in ``default`` and
``stepop`` admits up to the GPU node's 4 GPUs.
"""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

from cloud.kubernetes.api import JOBS
from cloud.kubernetes.conditions import is_true
from cloud.kubernetes.events import NORMAL
from cloud.kubernetes.quantities import gpus
from cloud.kubernetes.state import KubernetesState

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
COMPONENT = "kueue-job-controller"
DEFAULT_QUEUES: dict[str, dict[str, Any]] = {
    "user-queue": {
        "gpus": 4,
        "max_jobs": None,
        "namespaces": ["default", "stepop"],
        "cluster_queue": "cluster-queue",
    },
}


def check_queues(queues: Any) -> dict[str, dict[str, Any]]:
    """The queues of a ``/_fake/queues`` body, defaults filled in; ValueError if malformed."""
    if not isinstance(queues, dict):
        raise ValueError('give {"queues": {"<name>": {"gpus": n, "max_jobs": n, ...}}}')
    clean: dict[str, dict[str, Any]] = {}
    for name, queue in queues.items():
        queue = dict(queue or {})
        for field in ("gpus", "max_jobs"):
            value = queue.get(field)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise ValueError(f"queue {name}: {field} is a number >= 0 or null")
        namespaces = queue.get("namespaces", ["default", "stepop"])
        if not isinstance(namespaces, list):
            raise ValueError(f"queue {name}: namespaces is a list")
        clean[name] = {
            "gpus": queue.get("gpus"),
            "max_jobs": queue.get("max_jobs"),
            "namespaces": namespaces,
            "cluster_queue": queue.get("cluster_queue") or "cluster-queue",
        }
    return clean


def _resume(job: dict[str, Any]) -> None:
    """What Kueue's patch does: ``suspend: false`` (a spec change: a new generation)."""
    job["spec"]["suspend"] = False
    job["metadata"]["generation"] = int(job["metadata"].get("generation", 1)) + 1


class Kueue(KubernetesState):
    """The queues, the Jobs they admitted, and the admission pass of the controller loop."""

    def init_kueue(self) -> None:
        self.queues: dict[str, dict[str, Any]] = copy.deepcopy(DEFAULT_QUEUES)
        self.admitted: dict[str, tuple[str, Fraction]] = {}  # job uid -> (queue, GPUs)
        self.queued_seen: set[str] = set()

    def admit_jobs(self) -> None:
        """Admit the waiting Jobs that fit (caller holds the lock)."""
        jobs = {j["metadata"]["uid"]: j for j in self.store.items(JOBS.resource)}
        for uid in list(self.admitted):
            job = jobs.get(uid)
            conditions = (job or {}).get("status", {}).get("conditions")
            if job is None or is_true(conditions, "Complete") or is_true(conditions, "Failed"):
                del self.admitted[uid]
        waiting = sorted(
            (j for j in jobs.values() if self._waits(j)),
            key=lambda j: (
                j["metadata"]["creationTimestamp"],
                int(j["metadata"]["resourceVersion"]),
            ),
        )
        for job in waiting:
            meta = job["metadata"]
            name = meta["labels"][QUEUE_LABEL]
            if meta["uid"] not in self.queued_seen:
                self.queued_seen.add(meta["uid"])
                self.event(
                    JOBS,
                    job,
                    NORMAL,
                    "CreatedWorkload",
                    f"Created Workload: {meta['namespace']}/job-{meta['name']}",
                    COMPONENT,
                )
            queue = self.queues.get(name)
            if queue is None or meta["namespace"] not in queue["namespaces"]:
                continue
            demand = gpus(job["spec"]["template"]["spec"]) * int(job["spec"].get("parallelism", 1))
            mine = [used for q, used in self.admitted.values() if q == name]
            if queue["gpus"] is not None and sum(mine, Fraction(0)) + demand > queue["gpus"]:
                continue
            if queue["max_jobs"] is not None and len(mine) >= queue["max_jobs"]:
                continue
            self.admitted[meta["uid"]] = (name, demand)
            self.store.mutate(JOBS.resource, meta["namespace"], meta["name"], _resume)
            self.event(
                JOBS,
                job,
                NORMAL,
                "Started",
                f"Admitted by clusterQueue {queue['cluster_queue']}",
                COMPONENT,
            )

    def _waits(self, job: dict[str, Any]) -> bool:
        meta = job["metadata"]
        conditions = job.get("status", {}).get("conditions")
        return (
            QUEUE_LABEL in (meta.get("labels") or {})
            and bool(job["spec"].get("suspend"))
            and meta["uid"] not in self.admitted
            and not meta.get("deletionTimestamp")
            and not is_true(conditions, "Complete")
            and not is_true(conditions, "Failed")
        )

    def queue_report(self) -> dict[str, Any]:
        """The queues and the Jobs each admitted (``GET /_fake/queues``; caller holds the lock)."""
        jobs = {j["metadata"]["uid"]: j for j in self.store.items(JOBS.resource)}
        admitted: dict[str, list[str]] = {name: [] for name in self.queues}
        for uid, (queue, _gpus) in self.admitted.items():
            if uid in jobs:
                meta = jobs[uid]["metadata"]
                admitted.setdefault(queue, []).append(f"{meta['namespace']}/{meta['name']}")
        return {"queues": self.queues, "admitted": admitted}
