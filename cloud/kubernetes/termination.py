"""How a running container ends: it exits, its pod is deleted, or a fault kills it; and the
``terminated`` status the kubelet then reports.

* exit 0: ``Completed``, the pod ``Succeeded``; any other code: ``Error``, the pod ``Failed``
  (with ``terminationMessagePolicy: FallbackToLogsOnError`` the last 80 lines, 2 KiB at most,
  become the ``message``);
* the pod deleted: a ``Killing`` event, SIGTERM, SIGKILL after the grace period, the exit code
  the process ends with (143 after SIGTERM);
* an ``evict`` fault: the condition ``DisruptionTarget`` (``TerminationByKubelet``), ``Evicted``
  and ``Killing`` events, the process killed: exit 137, pod ``Failed`` with ``reason:
  Evicted`` and the kubelet's low-memory message;
* an ``oom_kill`` fault: the process killed, exit 137 ``OOMKilled`` and an ``OOMKilling``
  event on the node.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

from cloud.kubernetes.api import NODES, PODS
from cloud.kubernetes.conditions import set_condition
from cloud.kubernetes.events import WARNING
from cloud.kubernetes.podspec import container_status, terminated_state
from cloud.kubernetes.state import KubernetesState, PodRuntime
from cloud.runner import JobRun

KILLED = 137
EVICTED = (
    "The node was low on resource: memory. Threshold quantity: 100Mi, available: 51200Ki. "
    "Container {container} was using 2097152Ki, request is 0, has larger consumption of memory. "
)
POLL = 0.05


class ContainerEnd(KubernetesState):
    """The end of a pod's container, and the pod helpers the kubelet shares."""

    def _current(self, rt: PodRuntime) -> dict[str, Any] | None:
        """A copy of the pod as stored now; None once it is gone."""
        with self.lock:
            pod = self.store.get(PODS.resource, rt.namespace, rt.name)
            if pod is None or pod["metadata"]["uid"] != rt.uid:
                return None
            return copy.deepcopy(pod)

    def _update(self, rt: PodRuntime, change: Callable[[dict[str, Any]], Any]) -> None:
        with self.lock:
            if self._current(rt) is not None:
                self.store.mutate(PODS.resource, rt.namespace, rt.name, change)

    def _kubelet_event(self, pod: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.event(
            PODS,
            pod,
            type_,
            reason,
            message,
            "kubelet",
            pod["spec"].get("nodeName"),
            f"spec.containers{{{pod['spec']['containers'][0]['name']}}}",
        )

    def watch_container(self, rt: PodRuntime, run: JobRun) -> None:
        """Wait for the container's end, killing it when asked; then report it."""
        seen: set[int] = set()  # the fault rules this container has been matched against
        while True:
            code = run.result()
            if code is not None:
                self.terminate(rt, code, "Completed" if code == 0 else "Error")
                return
            pod = self._current(rt)
            if pod is None or self.stopping.is_set():  # gone (a reset) or the fake stops
                run.stop(grace=1)
                return
            if pod["metadata"].get("deletionTimestamp"):
                self._kubelet_event(pod, "Normal", "Killing", f"Stopping container {rt.container}")
                run.stop(grace=float(pod["metadata"].get("deletionGracePeriodSeconds") or 0))
                code = run.result()
                self.terminate(
                    rt, code if code is not None else KILLED, "Completed" if code == 0 else "Error"
                )
                return
            if self.faults.take_job_fault("evict", rt.name, seen) is not None:
                self._evict(rt, pod, run)
                return
            if self.faults.take_job_fault("oom_kill", rt.name, seen) is not None:
                run.stop(grace=0)
                node = self.store.get(NODES.resource, "", pod["spec"].get("nodeName") or "")
                if node is not None:
                    self.event(
                        NODES,
                        node,
                        WARNING,
                        "OOMKilling",
                        f"Memory cgroup out of memory: Killed process (python3) of pod "
                        f"{rt.namespace}/{rt.name}",
                        "kernel-monitor",
                        node["metadata"]["name"],
                    )
                self.terminate(rt, KILLED, "OOMKilled")
                return
            self.stopping.wait(POLL)

    def _evict(self, rt: PodRuntime, pod: dict[str, Any], run: JobRun) -> None:
        message = EVICTED.format(container=rt.container)
        now = time.time()
        self._update(
            rt,
            lambda p: set_condition(
                p["status"].setdefault("conditions", []),
                "DisruptionTarget",
                "True",
                "TerminationByKubelet",
                message,
                now,
            ),
        )
        self._kubelet_event(pod, WARNING, "Evicted", message)
        self._kubelet_event(pod, "Normal", "Killing", f"Stopping container {rt.container}")
        run.stop(grace=0)
        self.terminate(rt, KILLED, "Error", pod_reason="Evicted", pod_message=message)

    def terminate(
        self,
        rt: PodRuntime,
        code: int,
        reason: str,
        message: str | None = None,
        pod_reason: str | None = None,
        pod_message: str | None = None,
    ) -> None:
        """Report the container ended: its ``terminated`` state and the pod's phase."""
        finished = time.time()
        with self.lock:
            started = rt.ran["started"] if rt.ran else None
            if rt.ran is not None:
                rt.ran.update(finished=finished, exitCode=code, reason=pod_reason or reason)
            tail = self._failure_tail(rt) if code != 0 else None

        def end(pod: dict[str, Any]) -> None:
            status, container = pod["status"], pod["spec"]["containers"][0]
            if pod["metadata"].get("deletionTimestamp"):  # stopped: the deletion can end
                pod["metadata"]["deletionGracePeriodSeconds"] = 0
            status["phase"] = "Succeeded" if code == 0 and not pod_reason else "Failed"
            if pod_reason:
                status.update(reason=pod_reason, message=pod_message)
            fallback = container.get("terminationMessagePolicy") == "FallbackToLogsOnError"
            state = terminated_state(
                code, reason, started, finished, message or (tail if fallback else None)
            )
            container_id = (rt.ran or {}).get("containerID")
            status["containerStatuses"] = [
                container_status(container, state, container_id=container_id)
            ]
            conditions = status.setdefault("conditions", [])
            for kind in ("Ready", "ContainersReady"):
                set_condition(conditions, kind, "False", "PodCompleted", None, finished)
            set_condition(conditions, "PodReadyToStartContainers", "False", now=finished)

        self._update(rt, end)

    @staticmethod
    def _failure_tail(rt: PodRuntime) -> str:
        """The log's last 80 lines, 2 KiB at most (the kubelet's fallback message)."""
        text = "\n".join(line.text for line in rt.log.lines[-80:])
        return text[-2048:]
