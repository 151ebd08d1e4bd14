"""What a fake plugs into the server: :class:`FakeService`, with the ``/_fake/`` control API.

A fake subclasses it, adds its routes to ``self.router`` and gives its error shape; ``dispatch``
answers the control API, counts every call under its operation name and applies request faults
before the route's handler runs.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from cloud.fake_http.faults import FaultBook
from cloud.fake_http.paging import PageSize
from cloud.fake_http.routing import Request, Response, Router


class FakeService:
    """What a fake plugs into the server: routes, error shapes, and reset of its own state."""

    name = "fake"
    page_size: PageSize | None = None  # a fake with job list pages sets its own

    def __init__(self) -> None:
        self.router = Router()
        self.faults = FaultBook()
        self.counters: Counter[str] = Counter()
        self._count_lock = threading.Lock()
        self._local = threading.local()

    # --- hooks for the service -------------------------------------------------------------
    def error_response(self, status: int, message: str, kind: str) -> Response:
        """The service's error shape; ``kind`` is "throttle", "error", "not_found", "bad"."""
        return Response(status, {"error": {"code": status, "message": message}})

    def current_fault(self) -> dict[str, Any] | None:
        """The fault rule that fired for the request this thread is answering, if any."""
        return getattr(self._local, "fault", None)

    def reset(self, jobs: bool) -> None:
        """Forget state (counters and faults are cleared by the caller)."""

    def shutdown(self) -> None:
        """Stop running jobs."""

    # --- plumbing ----------------------------------------------------------------------------
    def count(self, operation: str) -> None:
        with self._count_lock:
            self.counters[operation] += 1

    def control(self, req: Request) -> Response | None:
        """The /_fake/ control API; None when the path is not a control path."""
        path = req.path
        if path == "/_fake/health":
            return Response(200, {"ok": True, "service": self.name})
        if path == "/_fake/counters" and req.method == "GET":
            with self._count_lock:
                return Response(200, {"counters": dict(self.counters)})
        if path == "/_fake/faults":
            if req.method == "GET":
                return Response(200, {"faults": self.faults.public()})
            if req.method == "DELETE":
                self.faults.clear()
                return Response(200, {"faults": []})
            if req.method == "POST":
                try:
                    body = req.json() or {}
                    rules = body.get("faults", [body])
                    self.faults.add(rules, replace=bool(body.get("replace", False)))
                except (ValueError, KeyError, TypeError) as exc:
                    return Response(400, {"error": str(exc)})
                return Response(200, {"faults": self.faults.public()})
        if path == "/_fake/mode":
            runner = getattr(self, "runner", None)
            if runner is None:
                return Response(404, {"error": f"{self.name} has no runner mode"})
            if req.method == "POST":
                try:
                    mode = (req.json() or {}).get("mode")
                except ValueError:
                    mode = None
                if mode not in ("process", "container"):
                    return Response(400, {"error": f"mode {mode!r}: use process or container"})
                runner.mode = mode
            return Response(200, {"mode": runner.mode})
        if self.page_size is not None and path == self.page_size.path:
            return self.page_size.control(req)
        if path == "/_fake/reset" and req.method == "POST":
            try:
                body = req.json() or {}
            except ValueError:
                body = {}
            self.faults.clear()
            with self._count_lock:
                self.counters.clear()
            if self.page_size is not None:
                self.page_size.reset()
            self.reset(jobs=bool(body.get("jobs", False)))
            return Response(200, {"ok": True})
        return None

    def dispatch(self, req: Request) -> Response:
        if req.path.startswith("/_fake/"):
            resp = self.control(req)
            if resp is not None:
                return resp
        route, match, other = self.router.find(req.method, req.path)
        if route is None:
            if other:
                return self.error_response(405, f"method {req.method} not allowed", "bad")
            return self.error_response(404, f"no such resource: {req.path}", "not_found")
        self.count(route.operation)
        fault = self.faults.request_fault(route.operation)
        self._local.fault = fault  # error_response() may read the rule (e.g. retry_after)
        if fault is not None:
            if fault["kind"] == "throttle":
                return self.error_response(429, "throttled (injected)", "throttle")
            status = int(fault.get("status", 503))
            return self.error_response(status, f"injected server error {status}", "error")
        req.match = match
        return route.handler(req)
