"""The Azure ML fake's job routes: create, read, list, cancel (a long-running operation), delete.

A PUT of a new name validates the body (:mod:`cloud.azureml.validation`), fills in what the
service fills in (output URIs, modes, ``services``), makes the job an MLflow run and starts its
life in a thread (:mod:`cloud.azureml.lifecycle`). A PUT of an existing name may only change
its tags, display name, description and archive flag, as on the service.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlencode

from cloud.azureml.arm import (
    PROVIDER,
    SEG,
    WS,
    ArmError,
    bad,
    invalid,
    read_json,
    system_data,
    ws_id,
)
from cloud.azureml.lifecycle import JobLifecycle
from cloud.azureml.state import DATASTORES, DEFAULT_DATASTORE, TERMINAL, AmlJob
from cloud.azureml.validation import check_job_name, same_output_defaults, validate_job
from cloud.fake_http import Request, Response, rfc3339


class JobRoutes(JobLifecycle):
    """``PUT|GET|DELETE {WS}/jobs/{name}``, ``GET {WS}/jobs``, ``POST .../cancel`` + its LRO."""

    def _add_job_routes(self) -> None:
        r = self.router
        r.add("PUT", rf"{WS}/jobs/(?P<job>{SEG})", "Jobs_CreateOrUpdate", self.put_job)
        r.add("GET", rf"{WS}/jobs/(?P<job>{SEG})", "Jobs_Get", self.get_job)
        r.add("DELETE", rf"{WS}/jobs/(?P<job>{SEG})", "Jobs_Delete", self.delete_job)
        r.add("GET", rf"{WS}/jobs", "Jobs_List", self.list_jobs)
        r.add("POST", rf"{WS}/jobs/(?P<job>{SEG})/cancel", "Jobs_Cancel", self.cancel_job)
        r.add(
            "GET",
            rf"/subscriptions/(?P<sub>{SEG})/providers/{PROVIDER}/locations/(?P<loc>{SEG})/"
            rf"mfeOperationResults/(?P<op>{SEG})",
            "OperationResults_Get",
            self.get_operation,
        )

    def put_job(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        name = m["job"]
        check_job_name(name)
        body = read_json(req)
        props = body.get("properties")
        if not isinstance(props, dict):
            raise invalid("The request body must contain 'properties'.")
        job_id = f"{ws_id(m)}/jobs/{name}"
        with self._lock:
            existing = self.jobs.get(job_id.lower())
        if existing is not None:
            return self._update_job(existing, props)
        validate_job(props, m["ws"], self.computes, self.region, DATASTORES)
        self._resolve_env(props["environmentId"])
        now = time.time()
        props = json.loads(json.dumps(props))
        props.setdefault("displayName", name)
        props.setdefault("experimentName", "Default")
        props.setdefault("isArchived", False)
        props.setdefault("tags", {})
        props.setdefault("properties", {})
        props.setdefault("computeId", None)
        props["status"] = "NotStarted"
        for oname, spec in (props.get("outputs") or {}).items():
            if not spec.get("uri"):
                spec["uri"] = (
                    f"azureml://datastores/{DEFAULT_DATASTORE}/paths/azureml/{name}/{oname}/"
                )
            spec.setdefault("mode", "ReadWriteMount")
        for spec in (props.get("inputs") or {}).values():
            if spec.get("jobInputType") != "literal":
                spec.setdefault("mode", "ReadOnlyMount")
        props["services"] = {
            "Tracking": {
                "jobServiceType": "Tracking",
                "endpoint": f"azureml://{self.region}.api.azureml.ms/mlflow/v1.0{ws_id(m)}",
            },
            "Studio": {
                "jobServiceType": "Studio",
                "endpoint": f"{req.base_url}/_fake/logs/{name}",
            },
        }
        resource = {
            "id": job_id,
            "name": name,
            "type": f"{PROVIDER}/workspaces/jobs",
            "properties": props,
            "systemData": system_data(now),
        }
        job = AmlJob(resource, m["sub"], m["rg"], m["ws"], name, created=now)
        with self._lock:
            if job_id.lower() in self.jobs:  # a concurrent PUT won
                return self._update_job(self.jobs[job_id.lower()], props)
            self.jobs[job_id.lower()] = job
            self.tracking.create_run(ws_id(m), name, props["experimentName"], props["displayName"])
        job.thread = threading.Thread(
            target=self._lifecycle, args=(job,), name=f"azureml-{name}", daemon=True
        )
        job.thread.start()
        return Response(201, self._render(job))

    def _update_job(self, job: AmlJob, props: dict[str, Any]) -> Response:
        """A PUT on an existing job may change only tags, displayName and description."""
        mutable = {"tags", "displayName", "description", "isArchived"}
        with self._lock:
            current = job.props
            for key, val in props.items():
                if key in mutable or key in ("status", "services"):
                    continue
                if val is None or key in ("properties",):
                    continue
                if current.get(key) != val and not same_output_defaults(key, current, val):
                    raise bad(
                        f"A job named '{job.name}' already exists; its '{key}' cannot be changed. "
                        "Use a new job name to submit a different job.",
                        "Conflict",
                    )
            for key in mutable:
                if props.get(key) is not None:
                    current[key] = props[key]
            job.resource["systemData"]["lastModifiedAt"] = rfc3339(time.time())
            return Response(200, self._render(job))

    def get_job(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        return Response(200, self._render(self._find_job(m)))

    def list_jobs(self, req: Request) -> Response:
        """Newest first, 100 a page (``nextLink``: the query plus ``$skipToken``), by view, tag."""
        m = req.match
        assert m is not None
        prefix = f"{ws_id(m)}/jobs/".lower()
        view = (req.arg("listViewType") or "ActiveOnly").lower()
        tag = req.arg("tag")
        with self._lock:
            jobs = [j for k, j in self.jobs.items() if k.startswith(prefix)]
        if view == "activeonly":
            jobs = [j for j in jobs if not j.props.get("isArchived")]
        elif view == "archivedonly":
            jobs = [j for j in jobs if j.props.get("isArchived")]
        if tag:
            jobs = [j for j in jobs if tag in (j.props.get("tags") or {})]
        jobs.sort(key=lambda j: j.created, reverse=True)
        start = int(req.arg("$skipToken") or 0)
        size = self.page_size.cap
        page = jobs[start : start + size]
        body: dict[str, Any] = {"value": [self._render(j) for j in page]}
        if start + size < len(jobs):  # the same query (view, tag...), the next page
            query = {k: v for k, v in req.query.items() if k != "$skipToken"}
            query["$skipToken"] = [str(start + size)]
            body["nextLink"] = f"{req.base_url}{req.path}?{urlencode(query, doseq=True)}"
        return Response(200, body)

    def delete_job(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        job = self._find_job(m)
        if job.status not in TERMINAL:
            raise bad(
                f"Job '{job.name}' is {job.status}; cancel it before deleting it.", "Conflict"
            )
        with self._lock:
            self.jobs.pop(job.resource["id"].lower(), None)
        return Response(200, None)

    def cancel_job(self, req: Request) -> Response:
        """202 with a ``Location`` to poll (:meth:`get_operation`) until the job has ended."""
        m = req.match
        assert m is not None
        job = self._find_job(m)
        with self._lock:
            if job.status not in TERMINAL and job.status != "CancelRequested":
                self._set_status(job, "CancelRequested")
            job.cancel.set()
        op = f"jc:{uuid.uuid4()}:{job.resource['id'].replace('/', '~')}"
        location = (
            f"{req.base_url}/subscriptions/{m['sub']}/providers/{PROVIDER}/locations/{self.region}/"
            f"mfeOperationResults/{op}?api-version={req.arg('api-version') or '2023-04-01'}"
        )
        return Response(
            202, None, headers={"Location": location, "Retry-After": str(self.lro_retry_after)}
        )

    def get_operation(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        parts = m["op"].split(":", 2)
        if len(parts) != 3 or parts[0] != "jc":
            raise ArmError(404, "ResourceNotFound", f"Operation '{m['op']}' not found.")
        job_id = parts[2].replace("~", "/")
        with self._lock:
            job = self.jobs.get(job_id.lower())
        if job is None or job.status in TERMINAL:
            return Response(200, None)
        return Response(202, None, headers={"Location": f"{req.base_url}{req.path}?api-version="
                                            f"{req.arg('api-version')}",
                                            "Retry-After": str(self.lro_retry_after)})  # fmt: skip
