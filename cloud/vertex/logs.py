"""The Vertex AI fake's job logs: Cloud Logging ``entries:list`` and a plain-text view.

Real Vertex writes a job's output to Cloud Logging (resource type ``ml_job``, log
``projects/{p}/logs/workerpool0-0``, stderr at severity ERROR); the fake serves the same
entries, leaving out lines a ``log_delay`` fault still holds back.
"""

from __future__ import annotations

from typing import Any

from cloud.fake_http import Request, Response, rfc3339
from cloud.vertex.api import ApiError, decode_token, encode_token
from cloud.vertex.filters import log_matches, parse_filter
from cloud.vertex.state import Job, LogEntry, VertexState


class LogRoutes(VertexState):
    """``POST /v2/entries:list`` and ``GET /_fake/logs/{id}[?task=...]``."""

    def _add_log_routes(self) -> None:
        r = self.router
        r.add("POST", r"/v2/entries:list", "ListLogEntries", self.list_log_entries)
        r.add("GET", r"/_fake/logs/(?P<job>[0-9A-Za-z_-]+)", "FakeLogs", self.fake_logs)

    def fake_logs(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        with self._lock:
            found = [j for j in self.jobs.values() if j.job_id == m["job"]]
        if not found:
            raise ApiError(404, f"no job with id {m['job']}")
        lines = [e.text for e in self._visible_logs(found[0], req.arg("task"))]
        text = "".join(line + "\n" for line in lines)
        return Response(200, raw=text.encode(), content_type="text/plain; charset=utf-8")

    def list_log_entries(self, req: Request) -> Response:
        """Cloud Logging v2 ``entries:list`` for ``resource.type="ml_job"`` entries."""
        try:
            body = req.json() or {}
        except ValueError as exc:
            raise ApiError(400, f"Invalid JSON payload received. {exc}") from exc
        flt = body.get("filter", "")
        clauses = parse_filter(flt)
        ids = {v for g in clauses for f, op, v, neg in g if f == "resource.labels.job_id"}
        job_id = ids.pop() if len(ids) == 1 and len(clauses) == 1 else None
        with self._lock:
            jobs = [j for j in self.jobs.values() if job_id is None or j.job_id == job_id]
        entries: list[tuple[Job, LogEntry]] = []
        for job in jobs:
            for e in self._visible_logs(job):
                if log_matches(job, e, clauses):
                    entries.append((job, e))
        entries.sort(key=lambda pair: (pair[1].ts, pair[1].seq))
        if (body.get("orderBy") or "").strip().lower().endswith("desc"):
            entries.reverse()
        size = int(body.get("pageSize") or 0) or 1000
        start = decode_token(body.get("pageToken"))
        page = entries[start : start + size]
        out: dict[str, Any] = {"entries": [_log_json(j, e) for j, e in page]}
        if start + size < len(entries):
            out["nextPageToken"] = encode_token(start + size)
        return Response(200, out)


def _log_json(job: Job, entry: LogEntry) -> dict[str, Any]:
    """A Cloud Logging ``LogEntry`` of the job's ``ml_job`` resource."""
    return {
        "logName": f"projects/{job.project}/logs/{entry.task}",
        "resource": {
            "type": "ml_job",
            "labels": {"job_id": job.job_id, "project_id": job.project, "task_name": entry.task},
        },
        "textPayload": entry.text,
        "timestamp": rfc3339(entry.ts),
        "severity": "ERROR" if entry.stream == "stderr" else "INFO",
        "insertId": f"{entry.seq:016x}",
    }
