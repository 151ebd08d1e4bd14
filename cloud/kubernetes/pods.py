"""Pods: get, list, watch, delete, and their logs (``GET .../pods/{name}/log``).

Pods are made by the job controller, not through the API (a POST is 405). A log request
answers ``text/plain`` (see :mod:`cloud.kubernetes.logs` for the query):

* a pod not on a node yet: an empty log;
* a container still waiting: 400 ``container "main" in pod "p" is waiting to start:
  ContainerCreating`` (``image can't be pulled`` for ErrImagePull, ``trying and failing to
  pull image`` for ImagePullBackOff, the reason otherwise), as the kubelet says;
* ``container`` must name one of the pod's containers (it may be left out when there is one);
  ``previous`` is 400 (containers are never restarted here);
* otherwise the lines so far, or with ``follow=true`` a stream until the container ends.
"""

from __future__ import annotations

import copy
import time

from cloud.fake_http import Request, Response
from cloud.kubernetes.api import PODS, bad_request, not_found
from cloud.kubernetes.deletion import Deletion, check_preconditions, delete_options
from cloud.kubernetes.logs import LogQuery, follow, read_all
from cloud.kubernetes.reads import ReadRoutes

IN_NS = r"/api/v1/namespaces/(?P<ns>[^/]+)/pods"
NAME = r"/(?P<name>[^/]+)"
WAITING_WORDS = {
    "ErrImagePull": "image can't be pulled",
    "ImagePullBackOff": "trying and failing to pull image",
}


class PodRoutes(ReadRoutes, Deletion):
    """The Pod endpoints and the log endpoint."""

    def _add_pod_routes(self) -> None:
        r = self.router
        r.add(
            "GET",
            IN_NS,
            "listCoreV1NamespacedPod",
            lambda req: self.list_or_watch(PODS, req, self._pod_ns(req)),
        )
        r.add(
            "GET",
            "/api/v1/pods",
            "listCoreV1PodForAllNamespaces",
            lambda req: self.list_or_watch(PODS, req, None),
        )
        r.add("GET", IN_NS + NAME, "readCoreV1NamespacedPod", self._get_pod)
        r.add("GET", IN_NS + NAME + "/status", "readCoreV1NamespacedPodStatus", self._get_pod)
        r.add("DELETE", IN_NS + NAME, "deleteCoreV1NamespacedPod", self._delete_pod)
        r.add("GET", IN_NS + NAME + "/log", "readCoreV1NamespacedPodLog", self._pod_log)

    @staticmethod
    def _pod_ns(req: Request) -> str:
        assert req.match is not None
        return req.match["ns"]

    def _get_pod(self, req: Request) -> Response:
        assert req.match is not None
        return Response(200, self.get_object(PODS, req.match["ns"], req.match["name"]))

    def _delete_pod(self, req: Request) -> Response:
        assert req.match is not None
        namespace, name = req.match["ns"], req.match["name"]
        _policy, grace, preconditions = delete_options(req, "Background")
        with self.lock:
            pod = self.store.get(PODS.resource, namespace, name)
            if pod is None:
                raise not_found(PODS, name)
            check_preconditions(PODS, pod, preconditions)
            if req.arg("dryRun") == "All":
                return Response(200, PODS.typed(copy.deepcopy(pod)))
            return Response(200, self.delete_pod(pod, grace))

    def _visible_before(self) -> int:
        """Lines read before this (epoch ns) may be shown: a ``log_delay`` holds back the rest."""
        return time.time_ns() - int(self.faults.seconds("log_delay") * 1e9)

    def _pod_log(self, req: Request) -> Response:
        assert req.match is not None
        namespace, name = req.match["ns"], req.match["name"]
        query = LogQuery.from_request(req)
        with self.lock:
            pod = self.store.get(PODS.resource, namespace, name)
            if pod is None:
                raise not_found(PODS, name)
            names = [c["name"] for c in pod["spec"].get("containers") or []]
            container = req.arg("container")
            if not container:
                if len(names) != 1:
                    raise bad_request(
                        f"a container name must be specified for pod {name}, "
                        f"choose one of: [{' '.join(names)}]"
                    )
                container = names[0]
            if container not in names:
                raise bad_request(f"container {container} is not valid for pod {name}")
            if (req.arg("previous") or "").lower() in ("true", "1"):
                raise bad_request(
                    f'previous terminated container "{container}" in pod "{name}" not found'
                )
            runtime = self.pods.get(pod["metadata"]["uid"])
            if not pod["spec"].get("nodeName") or runtime is None:
                return Response(200, raw=b"", content_type="text/plain")
            statuses = {s["name"]: s for s in pod["status"].get("containerStatuses") or []}
            waiting = (statuses.get(container, {}).get("state") or {}).get("waiting")
            if container != runtime.container or waiting is not None or container not in statuses:
                reason = (waiting or {}).get("reason") or "ContainerCreating"
                raise bad_request(
                    f'container "{container}" in pod "{name}" is waiting to start: '
                    f"{WAITING_WORDS.get(reason, reason)}"
                )
            uid = pod["metadata"]["uid"]
            if not query.follow:
                body = read_all(runtime.log, query, self._visible_before())
                return Response(200, raw=body, content_type="text/plain")

        def gone() -> bool:
            return self.stopping.is_set() or uid not in self.pods

        stream = follow(runtime.log, query, self.store.changed, self._visible_before, gone)
        return Response(200, stream=stream, content_type="text/plain")
