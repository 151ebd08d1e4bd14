"""The Azure ML fake's run history and log files: what ``MLClient.jobs.stream`` reads.

Run details carry the status, times, the failure (``error.error``: the ARM job resource carries
none, as in Azure) and ``logFiles``, URLs of the fake's own log routes. Lines held back by a
``log_delay`` fault are left out until they are due.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from cloud.azureml.arm import SEG, WS
from cloud.azureml.state import AmlJob, AzureMLState
from cloud.fake_http import Request, Response, rfc3339


class RunHistoryRoutes(AzureMLState):
    """``GET /history/v1.0{WS}/runs/{run}/details`` and the fake's log-file routes."""

    def _add_history_routes(self) -> None:
        r = self.router
        r.add(
            "GET",
            rf"/history/v1\.0{WS}(?:/experiments/{SEG})?/runs/(?P<job>{SEG})/details",
            "Runs_GetDetails",
            self.run_details,
        )
        r.add(
            "GET",
            rf"/_fake/azureml/logs/(?P<job>{SEG})/(?P<path>.+)",
            "FakeLogFile",
            self.log_file,
        )
        r.add("GET", rf"/_fake/logs/(?P<job>{SEG})", "FakeLogs", self.all_logs)

    def _log_files(self, job: AmlJob, base: str) -> dict[str, str]:
        files = sorted({ln.file for ln in self._visible(job)})
        return {f: f"{base}/_fake/azureml/logs/{job.name}/{f}" for f in files}

    def run_details(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        job = self._find_job(m)
        with self._lock:
            props = job.props
            body: dict[str, Any] = {
                "runId": job.name,
                "runUuid": str(uuid.uuid5(uuid.NAMESPACE_URL, job.resource["id"])),
                "status": props["status"],
                "target": (props.get("computeId") or "serverless").rsplit("/", 1)[-1],
                "createdTimeUtc": rfc3339(job.created),
                "startTimeUtc": rfc3339(job.started),
                "endTimeUtc": rfc3339(job.ended),
                "tags": props.get("tags") or {},
                "properties": props.get("properties") or {},
                "logFiles": self._log_files(job, req.base_url),
                "warnings": [dict(w) for w in job.warnings],
            }
            if job.error is not None:
                body["error"] = {"error": job.error, "time": rfc3339(job.ended)}
        return Response(200, body)

    def log_file(self, req: Request) -> Response:
        """One log file (a ``logFiles`` URL) as plain text, a ``Range`` of it as Blob Storage
        (where Azure's URLs point) answers one."""
        m = req.match
        assert m is not None
        job = self._job_by_name(m["job"])
        text = "".join(ln.text + "\n" for ln in self._visible(job, m["path"]))
        return ranged(text.encode(), req.headers.get("range"))

    def all_logs(self, req: Request) -> Response:
        """Every log line of a job (the ``Studio`` service endpoint) as plain text."""
        m = req.match
        assert m is not None
        job = self._job_by_name(m["job"])
        text = "".join(ln.text + "\n" for ln in self._visible(job))
        return Response(200, raw=text.encode(), content_type="text/plain; charset=utf-8")


def ranged(data: bytes, header: str | None) -> Response:
    """``Range: bytes=a-[b]`` as Blob Storage answers it: 206 with ``Content-Range`` (the end
    clipped to the blob's), 416 from a start at or past the end; no or another Range: 200."""
    found = re.fullmatch(r"bytes=(\d+)-(\d*)", (header or "").strip())
    start = int(found[1]) if found else 0
    if found is None or (found[2] and int(found[2]) < start):  # not a range it reads
        return Response(200, raw=data, content_type="text/plain; charset=utf-8")
    end = min(int(found[2]) if found[2] else len(data) - 1, len(data) - 1)
    if start >= len(data):
        headers = {"Content-Range": f"bytes */{len(data)}"}
        return Response(416, raw=b"", headers=headers, content_type="text/plain; charset=utf-8")
    headers = {"Content-Range": f"bytes {start}-{end}/{len(data)}"}
    return Response(
        206, raw=data[start : end + 1], headers=headers, content_type="text/plain; charset=utf-8"
    )
