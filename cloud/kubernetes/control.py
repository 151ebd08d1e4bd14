"""This fake's own controls under ``/_fake/`` (the shared ones are in :mod:`cloud.fake_http`).

``GET|POST|DELETE /_fake/nodes``
    the nodes (compact specs, :mod:`cloud.kubernetes.nodes`); POST ``{"nodes": [...]}`` replaces
    them all, DELETE restores the two default nodes.
``GET|POST|DELETE /_fake/queues``
    Kueue's queues and what each admitted; POST ``{"queues": {...}}`` replaces them
    (:mod:`cloud.kubernetes.kueue`), DELETE restores ``user-queue``.
``GET|DELETE /_fake/ran``
    what the kubelet started, oldest first (namespace, pod, job, node, hostname, image, mode,
    command, args, env, workingDir, mounts, started, finished, exitCode, reason); DELETE
    forgets it.
``POST /_fake/compact``
    forget the change history: a watch or a ``continue`` token from before gets 410 Expired;
    answers ``{"resourceVersion": "<now>"}``.
"""

from __future__ import annotations

import copy
from typing import Any

from cloud.fake_http import Request, Response
from cloud.kubernetes.kueue import DEFAULT_QUEUES, Kueue, check_queues
from cloud.kubernetes.nodes import DEFAULT_NODES


class ControlRoutes(Kueue):
    """The control paths of the module docstring."""

    def own_control(self, req: Request) -> Response | None:
        """The answer to one of this fake's control paths; None for any other path."""
        path, method = req.path, req.method
        if path == "/_fake/nodes":
            return self._nodes(method, req)
        if path == "/_fake/queues":
            return self._queues(method, req)
        if path == "/_fake/ran":
            with self.lock:
                if method == "DELETE":
                    self.ran.clear()
                return Response(200, {"ran": copy.deepcopy(self.ran)})
        if path == "/_fake/compact" and method == "POST":
            with self.lock:
                return Response(200, {"resourceVersion": str(self.store.compact())})
        return None

    @staticmethod
    def _control_body(req: Request) -> dict[str, Any]:
        try:
            body = req.json() or {}
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise ValueError("the body is a JSON object")
        return body

    def _nodes(self, method: str, req: Request) -> Response:
        try:
            if method == "POST":
                nodes = self._control_body(req).get("nodes")
                if not isinstance(nodes, list):
                    raise ValueError('give {"nodes": [{"name": ..., "capacity": {...}}, ...]}')
                self.replace_nodes(nodes)
            elif method == "DELETE":
                self.replace_nodes(copy.deepcopy(DEFAULT_NODES))
        except (ValueError, TypeError, KeyError) as exc:
            return Response(400, {"error": str(exc)})
        with self.lock:
            return Response(200, {"nodes": copy.deepcopy(self.node_specs)})

    def _queues(self, method: str, req: Request) -> Response:
        try:
            queues = None
            if method == "POST":
                queues = check_queues(self._control_body(req).get("queues"))
            elif method == "DELETE":
                queues = copy.deepcopy(DEFAULT_QUEUES)
        except ValueError as exc:
            return Response(400, {"error": str(exc)})
        with self.lock:
            if queues is not None:
                self.queues = queues
            return Response(200, copy.deepcopy(self.queue_report()))
