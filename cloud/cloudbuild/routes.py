"""The Cloud Build fake's routes: CreateBuild, GetBuild, CancelBuild, ListBuilds, GetOperation.

Each has a project form (``/v1/projects/{p}/builds...``: the ``global`` location, or the one a
``parent`` / ``name`` query parameter names, as the client sends it when both are set) and a
location form (``/v1/projects/{p}/locations/{l}/builds...``). A build is seen only through its
own location, as on the service.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from cloud.cloudbuild.api import (
    ApiError,
    build_id_of_operation,
    decode_token,
    encode_token,
    ints,
    operation_name,
    parse_build,
    render_build,
    render_operation,
)
from cloud.cloudbuild.filters import parse_filter
from cloud.cloudbuild.lifecycle import BuildLifecycle
from cloud.cloudbuild.logs import GCS_MODES, BuildLog
from cloud.cloudbuild.state import TERMINAL, Job
from cloud.cloudbuild.validation import check_build, logs_bucket, substitute
from cloud.fake_http import Request, Response, rfc3339

SEGMENT = r"[^/:]+"
PROJECT = rf"/v1/projects/(?P<project>{SEGMENT})"
LOCATION = rf"{PROJECT}/locations/(?P<location>{SEGMENT})"
DEFAULT_PAGE = 50
PROJECT_NUMBER = "123456789012"


class BuildRoutes(BuildLifecycle):
    """The routes, on the shared build store."""

    def add_routes(self) -> None:
        r = self.router
        for base in (PROJECT, LOCATION):
            one = rf"{base}/builds/(?P<build>{SEGMENT})"
            r.add("POST", rf"{base}/builds", "CreateBuild", self.create)
            r.add("GET", rf"{base}/builds", "ListBuilds", self.list)
            r.add("GET", one, "GetBuild", self.get)
            r.add("POST", rf"{one}:cancel", "CancelBuild", self.cancel)
        r.add("GET", rf"/v1/operations/build/(?P<project>{SEGMENT})/(?P<op>{SEGMENT})",
              "GetOperation", self.get_operation)  # fmt: skip
        r.add("GET", rf"{LOCATION}/operations/(?P<op>{SEGMENT})", "GetOperation",
              self.get_operation)  # fmt: skip

    # --- where ------------------------------------------------------------------------------
    @staticmethod
    def _where(req: Request, query: str) -> tuple[str, str]:
        """(project, location) of the call: the path's, or the ``parent``/``name`` parameter's."""
        m = req.match
        assert m is not None
        project, location = m["project"], m.groupdict().get("location")
        if location is None:
            named = req.arg(query) or ""
            parts = named.split("/")
            location = "global"
            if len(parts) >= 4 and parts[0] == "projects" and parts[2] == "locations":
                if parts[1] != project:
                    raise ApiError(400, f"{query} {named!r} names another project than {project}")
                location = parts[3]
        return project, location

    def _job(self, req: Request, query: str = "name") -> Job:
        project, location = self._where(req, query)
        assert req.match is not None
        job = self.job(project, req.match["build"])
        if job.location != location:
            raise ApiError(404, f'Build "{req.match["build"]}" not found')
        return job

    # --- API ---------------------------------------------------------------------------------
    def create(self, req: Request) -> Response:
        project, location = self._where(req, "parent")
        try:
            body = req.json()
        except ValueError as exc:
            raise ApiError(400, "Invalid JSON payload received.") from exc
        build = parse_build(body)
        check_build(build)
        self._check_logs_bucket(build)
        build_id = str(uuid.uuid4())
        values = {
            "PROJECT_ID": project,
            "PROJECT_NUMBER": PROJECT_NUMBER,
            "BUILD_ID": build_id,
            "LOCATION": location,
            "SERVICE_ACCOUNT_EMAIL": build.get("serviceAccount", "").rsplit("/", 1)[-1],
            "SERVICE_ACCOUNT": build.get("serviceAccount", ""),
            **build.get("substitutions", {}),
        }
        build = substitute(build, values)
        resource = self._resource(build, project, location, build_id)
        job = Job(
            resource=resource, project=project, location=location, log=self._log(build, build_id)
        )
        with self.lock:
            self.jobs[build_id] = job
        answer = self._operation(req, job)  # QUEUED, as the service answers, before it starts
        job.thread = threading.Thread(
            target=self.work, args=(job,), daemon=True, name=f"cloudbuild-{build_id}"
        )
        job.thread.start()
        return answer

    def _check_logs_bucket(self, build: dict[str, Any]) -> None:
        if "logsBucket" not in build or self.storage is None:
            return
        from google.api_core import exceptions

        bucket, _ = logs_bucket(build["logsBucket"])
        try:
            self.storage.get_bucket(bucket)
        except exceptions.NotFound as exc:
            raise ApiError(
                400,
                f'invalid bucket "{bucket}"; builder service account does not have access to '
                "the bucket",
            ) from exc

    @staticmethod
    def _log(build: dict[str, Any], build_id: str) -> BuildLog:
        mode = (build.get("options") or {}).get("logging", "LOGGING_UNSPECIFIED")
        if "logsBucket" not in build or mode not in GCS_MODES:
            return BuildLog(bucket=None, object_name=f"log-{build_id}.txt")
        bucket, prefix = logs_bucket(build["logsBucket"])
        name = f"{prefix}/log-{build_id}.txt" if prefix else f"log-{build_id}.txt"
        return BuildLog(bucket=bucket, object_name=name)

    @staticmethod
    def _resource(
        build: dict[str, Any], project: str, location: str, build_id: str
    ) -> dict[str, Any]:
        """The Build as the service stores it, QUEUED."""
        console = "https://console.cloud.google.com/cloud-build/builds"
        resource: dict[str, Any] = {
            **build,
            "name": f"projects/{project}/locations/{location}/builds/{build_id}",
            "id": build_id,
            "projectId": project,
            "status": "QUEUED",
            "createTime": rfc3339(time.time()),
            "timeout": build.get("timeout", "3600s"),
            "queueTtl": build.get("queueTtl", "3600s"),
            "logUrl": f"{console};region={location}/{build_id}?project={PROJECT_NUMBER}",
            "options": {"logging": "LEGACY", **build.get("options", {})},
        }
        resource["steps"] = [{**step, "status": "QUEUED"} for step in build["steps"]]
        return resource

    def _operation(self, req: Request, job: Job) -> Response:
        name = operation_name(job.project, job.location, job.id)
        with self.lock:
            body = render_operation(name, job.resource, job.status, job.status in TERMINAL,
                                    ints(req))  # fmt: skip
        return Response(200, body)

    def get(self, req: Request) -> Response:
        job = self._job(req)
        with self.lock:
            return Response(200, render_build(job.resource, ints(req)))

    def cancel(self, req: Request) -> Response:
        try:
            body = req.json() or {}
        except ValueError:
            body = {}
        name = body.get("name") if isinstance(body, dict) else None
        if name:
            req.query = {**req.query, "name": [name]}
        job = self._job(req)
        if job.status not in TERMINAL:
            job.cancel.set()
            self.set_status(job, "CANCELLED", statusDetail="Build was cancelled")
        with self.lock:
            return Response(200, render_build(job.resource, ints(req)))

    def list(self, req: Request) -> Response:
        project, location = self._where(req, "parent")
        keep = parse_filter(req.arg("filter"))
        with self.lock:
            builds = [
                j.resource
                for j in self.jobs.values()
                if j.project == project and j.location == location and keep(j.resource)
            ]
            builds.sort(key=lambda b: b["createTime"], reverse=True)
            try:
                size = int(req.arg("pageSize") or 0) or DEFAULT_PAGE
            except ValueError as exc:
                raise ApiError(400, "Invalid pageSize.") from exc
            size = min(size, self.page_size.cap)
            start = decode_token(req.arg("pageToken"))
            page = [render_build(b, ints(req)) for b in builds[start : start + size]]
        out: dict[str, Any] = {"builds": page}
        if start + size < len(builds):
            out["nextPageToken"] = encode_token(start + size)
        return Response(200, out)

    def get_operation(self, req: Request) -> Response:
        assert req.match is not None
        name = req.path.removeprefix("/v1/")
        build_id = build_id_of_operation(name)
        with self.lock:
            job = self.jobs.get(build_id or "")
        if job is None or job.project != req.match["project"]:
            raise ApiError(404, f'Operation "{name}" not found')
        return self._operation(req, job)
