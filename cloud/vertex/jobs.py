"""The Vertex AI fake's CustomJob routes: create, get, list, cancel, delete (a done LRO).

``CreateCustomJob`` validates the body (:mod:`cloud.vertex.validation`), stores the job as
JOB_STATE_QUEUED and starts its life in a thread (:mod:`cloud.vertex.lifecycle`).
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any

from cloud.fake_http import Request, Response, rfc3339
from cloud.vertex.api import PARENT, ApiError, decode_token, encode_token, get_field, render
from cloud.vertex.filters import matches, parse_filter
from cloud.vertex.lifecycle import JobLifecycle
from cloud.vertex.metadata import check_job_contexts
from cloud.vertex.state import TERMINAL, Job, machine_names, pool_machines, quota_metric
from cloud.vertex.validation import validate_custom_job

# A CustomJob's fields, as a read mask may name them (camelCase, as in JSON).
CUSTOM_JOB_FIELDS = frozenset({
    "name", "displayName", "jobSpec", "state", "createTime", "startTime", "endTime",
    "updateTime", "error", "labels", "encryptionSpec", "webAccessUris", "satisfiesPzs",
    "satisfiesPzi",
})  # fmt: skip


def read_mask(jobs: list[dict[str, Any]], mask: str | None) -> list[dict[str, Any]]:
    """Only the fields a ``readMask`` names (comma-separated paths; a path may go into a
    message, never through a repeated field), as Vertex answers a List call; all without one."""
    if not mask:
        return jobs
    paths = [path.strip() for path in mask.split(",") if path.strip()]
    for path in paths:
        if path.split(".")[0] not in CUSTOM_JOB_FIELDS:
            raise ApiError(400, f"Invalid field mask path {path!r}: CustomJob has no such field.")
    return [_masked(job, paths) for job in jobs]


def _masked(job: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for path in paths:
        *parents, leaf = path.split(".")
        source: Any = job
        target = kept
        for key in parents:
            source = source.get(key)
            if isinstance(source, list):
                raise ApiError(400, f"Invalid field mask path {path!r}: {key} is repeated.")
            if source is None:
                break
            target = target.setdefault(key, {})
        else:
            if leaf in source:
                target[leaf] = source[leaf]
    return kept


class JobRoutes(JobLifecycle):
    """``/v1/projects/{p}/locations/{l}/customJobs[/{id}[:cancel]]`` and delete operations."""

    def _add_job_routes(self) -> None:
        jobs = rf"{PARENT}/customJobs"
        one = rf"{jobs}/(?P<job>[0-9A-Za-z_-]+)"
        r = self.router
        r.add("POST", jobs, "CreateCustomJob", self.create)
        r.add("GET", jobs, "ListCustomJobs", self.list)
        r.add("GET", one, "GetCustomJob", self.get)
        r.add("POST", rf"{one}:cancel", "CancelCustomJob", self.cancel_job)
        r.add("DELETE", one, "DeleteCustomJob", self.delete)
        r.add("GET", rf"{one}/operations/(?P<op>\d+)", "GetOperation", self.get_operation)

    # --- API -----------------------------------------------------------------------------
    def create(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        try:
            body = req.json()
        except ValueError as exc:
            raise ApiError(400, f"Invalid JSON payload received. {exc}") from exc
        body = validate_custom_job(body)
        with self._lock:
            check_job_contexts(self.contexts, get_field(body, "jobSpec") or {}, m["project"],
                               m["location"])  # fmt: skip
        self._check_quota(body, m["location"])
        job_id = str(secrets.randbelow(9 * 10**18) + 10**18)
        name = f"projects/{m['project']}/locations/{m['location']}/customJobs/{job_id}"
        now = rfc3339(time.time())
        resource: dict[str, Any] = {
            "name": name,
            "displayName": get_field(body, "displayName"),
            "jobSpec": get_field(body, "jobSpec"),
            "state": "JOB_STATE_QUEUED",
            "createTime": now,
            "updateTime": now,
        }
        if get_field(body, "labels"):
            resource["labels"] = get_field(body, "labels")
        if get_field(body, "encryptionSpec"):
            resource["encryptionSpec"] = get_field(body, "encryptionSpec")
        job = Job(resource, m["project"], m["location"], job_id)
        with self._lock:
            self.jobs[name] = job
        job.thread = threading.Thread(
            target=self._lifecycle, args=(job,), name=f"vertex-{job_id}", daemon=True
        )
        job.thread.start()
        return self._answer(req, job)

    def _check_quota(self, body: dict[str, Any], location: str) -> None:
        """A ``capacity`` rule at ``create``: the project's custom-training quota of the machine
        is spent, and CreateCustomJob answers 429 RESOURCE_EXHAUSTED as Vertex AI does."""
        name = str(get_field(body, "displayName") or "")
        for machine in pool_machines(get_field(body, "jobSpec") or {}):
            rule = self.faults.take_capacity("create", machine_names(machine), location, name)
            if rule is not None:
                raise ApiError(
                    429,
                    str(rule.get("reason") or "")
                    or "The following quota metrics exceed quota limits: "
                    f"aiplatform.googleapis.com/{quota_metric(machine)}",
                )

    def get(self, req: Request) -> Response:
        return self._answer(req, self._job(req))

    def list(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        prefix = f"projects/{m['project']}/locations/{m['location']}/customJobs/"
        flt = parse_filter(req.arg("filter") or "")
        with self._lock:
            jobs = [j for n, j in self.jobs.items() if n.startswith(prefix)]
            jobs = [j for j in jobs if matches(j.resource, flt)]
            jobs.sort(key=lambda j: (j.resource["createTime"], j.job_id), reverse=True)
            size = int(req.arg("pageSize") or 0) or 100
            size = min(size, self.page_size.cap)
            start = decode_token(req.arg("pageToken"))
            page = jobs[start : start + size]
            jobs_out = [render(j.resource, self._ints(req)) for j in page]
            body: dict[str, Any] = {"customJobs": read_mask(jobs_out, req.arg("readMask"))}
            if start + size < len(jobs):
                body["nextPageToken"] = encode_token(start + size)
        return Response(200, body)

    def cancel_job(self, req: Request) -> Response:
        job = self._job(req)
        with self._lock:
            if job.state in TERMINAL:
                raise ApiError(
                    400,
                    f'Cannot cancel CustomJob "{job.resource["name"]}" because it is in state '
                    f"{job.state}.",
                )
            if job.state != "JOB_STATE_CANCELLING":
                self._set_state(job, "JOB_STATE_CANCELLING")
            job.cancel.set()
        return Response(200, {})

    def delete(self, req: Request) -> Response:
        job = self._job(req)
        with self._lock:
            if job.state not in TERMINAL:
                raise ApiError(
                    400,
                    f'CustomJob "{job.resource["name"]}" is in state {job.state}; cancel it and '
                    "wait for a final state before deleting it.",
                )
            del self.jobs[job.resource["name"]]
        return Response(200, self._operation(job.resource["name"], "1"))

    def get_operation(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        name = f"projects/{m['project']}/locations/{m['location']}/customJobs/{m['job']}"
        return Response(200, self._operation(name, m["op"]))

    @staticmethod
    def _operation(job_name: str, op: str) -> dict[str, Any]:
        now = rfc3339(time.time())
        return {
            "name": f"{job_name}/operations/{op}",
            "metadata": {
                "@type": "type.googleapis.com/google.cloud.aiplatform.v1.DeleteOperationMetadata",
                "genericMetadata": {"createTime": now, "updateTime": now},
            },
            "done": True,
            "response": {"@type": "type.googleapis.com/google.protobuf.Empty"},
        }
