"""The fake's state: settings, the object store, the runner, and what runs each pod.

:class:`KubernetesState` is the base of every part of the fake (the API routes, the job
controller, the scheduler, the kubelet, Kueue, the control API). One lock guards the store and
every table here; the store's condition is notified on every change and every log line, which
is what watches, followed logs and the controller loop wait on.
"""

from __future__ import annotations

import copy
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from cloud import runner as runner_mod
from cloud.fake_http import FakeService
from cloud.kubernetes.api import NAMESPACES, NODES, Kind, k8s_time, namespace_not_found, new_uid
from cloud.kubernetes.events import record_event
from cloud.kubernetes.logs import ContainerLog
from cloud.kubernetes.nodes import DEFAULT_NODES, node_object
from cloud.kubernetes.store import Store

DEFAULT_TOKEN = "stepop-kubernetes-token"
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease", "stepop")
# fault kinds of this fake only -> a rule's default count (None: until cleared)
OWN_FAULT_KINDS: dict[str, int | None] = {"evict": 1, "oom_kill": 1, "image_pull": None}


@dataclass
class PodRuntime:
    """What the kubelet keeps about a pod it runs: its container's log and what ran."""

    uid: str
    namespace: str
    name: str
    container: str
    log: ContainerLog = field(default_factory=ContainerLog)
    ran: dict[str, Any] | None = None  # the /_fake/ran record, once started


@dataclass
class JobTrack:
    """What the job controller counted of a Job's pods (by pod uid), as its finalizers do."""

    succeeded: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    indexes: set[int] = field(default_factory=set)  # completed indexes (Indexed)
    not_counted: set[str] = field(default_factory=set)  # pods deleted while suspending
    retry_at: float = 0.0  # no replacement pod before then (backoff after a failure)
    started_at: float = 0.0  # when it last became active (activeDeadlineSeconds counts from it)
    finished_at: float | None = None  # when it got Complete or Failed (for its TTL)


class KubernetesState(FakeService):
    """Settings, the store and the runtime tables shared by the parts of the fake."""

    name = "kubernetes"

    def __init__(
        self,
        token: str = DEFAULT_TOKEN,
        mode: str | None = None,
        tmp_base: str | None = None,
        data_dir: str | None = None,
        base_image: runner_mod.BaseImage | None = None,
        tick: float = 0.05,
    ) -> None:
        super().__init__()
        self.faults.own_kinds = dict(OWN_FAULT_KINDS)
        self.token = token
        self.lock = threading.RLock()
        self.store = Store(self.lock)
        self.runner = runner_mod.Runner(
            mode or os.environ.get("STEPOP_FAKE_MODE") or runner_mod.MODE_PROCESS,
            tmp_base=tmp_base,
            base_image=base_image,
        )
        self.tmp_base = tmp_base
        # persistentVolumeClaim volumes are directories under here, one per namespace/claim
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="stepop-kubernetes-")
        self.tick = tick
        self.pods: dict[str, PodRuntime] = {}  # pod uid -> runtime
        self.tracks: dict[str, JobTrack] = {}  # job uid -> counts
        self.ran: list[dict[str, Any]] = []
        self.node_specs: list[dict[str, Any]] = copy.deepcopy(DEFAULT_NODES)
        self.stopping = threading.Event()
        self.seed()

    def seed(self) -> None:
        """The namespaces and nodes a fresh cluster has."""
        with self.lock:
            for name in DEFAULT_NAMESPACES:
                if self.store.get(NAMESPACES.resource, "", name) is None:
                    self.store.add(NAMESPACES.resource, namespace_object(name))
            self.replace_nodes(self.node_specs)

    def replace_nodes(self, specs: list[dict[str, Any]]) -> None:
        """Serve exactly these nodes (compact specs, see :mod:`cloud.kubernetes.nodes`);
        ValueError for a bad one, and then nothing changes."""
        now = time.time()
        nodes = [node_object(spec, now) for spec in specs]
        with self.lock:
            self.node_specs = copy.deepcopy(specs)
            wanted = {n["metadata"]["name"] for n in nodes}
            for node in self.store.items(NODES.resource):
                if node["metadata"]["name"] not in wanted:
                    self.store.remove(NODES.resource, "", node["metadata"]["name"])
            for node in nodes:
                old = self.store.get(NODES.resource, "", node["metadata"]["name"])
                if old is not None:
                    node["metadata"]["uid"] = old["metadata"]["uid"]
                    node["metadata"]["creationTimestamp"] = old["metadata"]["creationTimestamp"]
                self.store.put(NODES.resource, node)

    def require_namespace(self, namespace: str) -> None:
        """404 ``namespaces "x" not found`` unless it exists (caller holds the lock)."""
        if self.store.get(NAMESPACES.resource, "", namespace) is None:
            raise namespace_not_found(namespace)

    def event(
        self,
        kind: Kind,
        obj: dict[str, Any],
        type_: str,
        reason: str,
        message: str,
        component: str,
        host: str | None = None,
        field_path: str | None = None,
    ) -> None:
        """Record an event about ``obj`` (see :mod:`cloud.kubernetes.events`)."""
        with self.lock:
            record_event(self.store, kind, obj, type_, reason, message, component, host, field_path)


def namespace_object(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A new, Active namespace."""
    return {
        "metadata": {
            "name": name,
            "uid": new_uid(),
            "creationTimestamp": k8s_time(),
            "labels": {**(labels or {}), "kubernetes.io/metadata.name": name},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }
