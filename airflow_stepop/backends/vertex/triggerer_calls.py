"""The Vertex AI backend's triggerer side, which ``VertexBackend`` inherits: the async
JobService REST client (``astatus``: GetCustomJob; ``astatuses``: ListCustomJobs pages of 100
jobs' states per poll for many jobs), Cloud Logging ``entries:list`` at a bounded rate with a
(timestamp, insertId) cursor, CancelCustomJob on kill and timeout. The worker's calls are
``backend``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_stepop.backends.list_pages import WatchedPages
from airflow_stepop.backends.ratelimit import list_limiter, log_limiter
from airflow_stepop.backends.vertex.job import OUR_LABEL, epoch

if TYPE_CHECKING:
    from airflow_stepop.backends.base import JobStatus
    from airflow_stepop.backends.vertex.api import GoogleAccess

LOG_LOOKBACK_S = 10.0  # late log entries within this window of the newest one are not lost
LOG_SETTLE_S = 5.0  # the last read waits this long after the job's end: entries arrive late
FINAL_LOG_PAGES = 20
# What a poll reads of each listed job (ListCustomJobs' read_mask): its state and times. A whole
# CustomJob echoes its spec back; parsing a page of 100 took 40 ms of the triggerer's CPU, this
# about 6 ms. An ended job's facts (machine, replicas, spot) come from one describe instead.
LIST_FIELDS = (
    "name", "state", "error", "create_time", "start_time", "end_time",
    "job_spec.scheduling.strategy",  # a FLEX_START job's PENDING is queued for capacity
)  # fmt: skip


class VertexTriggererCalls:
    """``VertexBackend``'s async calls, with the job states and end times they keep."""

    access: GoogleAccess
    _state: dict[str, str]  # job id -> last JobStatus.state seen
    _final: dict[str, float]  # job id -> when it ended (epoch seconds)

    def _status(self, job: Any) -> JobStatus:
        raise NotImplementedError  # ``backend``

    def prepare_async(self) -> None:
        """The connection, read once here in a thread: the async calls use what it cached."""
        self.access.prepare_async()

    def forget(self, handle: dict[str, Any]) -> None:
        self._state.pop(handle["job_id"], None)
        self._final.pop(handle["job_id"], None)

    async def astatus(self, handle: dict[str, Any]) -> JobStatus:
        async with self.access.ajobs() as client:
            return self._status(await client.get_custom_job(name=handle["name"]))

    async def astatuses(self, handles: list[dict[str, Any]]) -> dict[str, JobStatus]:
        """ListCustomJobs pages (our label, created since the oldest watched job, newest first)
        while watched jobs are missing from them: N jobs cost about ceil(N / 100) calls a poll.

        A page is read only while it can still spare describes (``WatchedPages``: a job behind
        many others' pages is described by the poller instead). Pages hold ``LIST_FIELDS`` of
        each job only: an ended job's facts come from one describe, as for SageMaker.
        """
        if not handles:
            return {}
        oldest = min(h.get("create_time") or "1970-01-01T00:00:00Z" for h in handles)
        request = {
            "parent": self.access.parent,
            "filter": f'labels.{OUR_LABEL[0]}="{OUR_LABEL[1]}" AND create_time>="{oldest}"',
            "page_size": 100,
            "read_mask": {"paths": list(LIST_FIELDS)},
        }
        out: dict[str, JobStatus] = {}
        limiter = list_limiter(self.poll_group())
        watched = WatchedPages(h["job_id"] for h in handles)  # the filter drops older pages
        async with self.access.ajobs() as client:
            await limiter.aacquire()
            pager = await client.list_custom_jobs(request=request)
            async with contextlib.aclosing(pager.pages) as pages:  # the client's own paging
                async for page in pages:
                    for job in page.custom_jobs:
                        job_id = job.name.rsplit("/", 1)[1]
                        if watched.answers(job_id):
                            out[job_id] = self._status(job)
                    if watched.last() or not page.next_page_token:
                        break
                    await limiter.aacquire()  # for the pager's next call
        return out

    async def alogs(self, handle: dict[str, Any], cursor: Any) -> tuple[list[str], Any]:
        from airflow_stepop.backends.log_lines import relayed_lines

        job_id = handle["job_id"]
        cursor = dict(cursor or {"ts": None, "seen": {}})
        final = job_id in self._final
        if not final and self._state.get(job_id) in (None, "pending"):
            return [], cursor  # no log call while the machines are being provisioned
        access = self.access
        if final:
            await asyncio.sleep(max(0.0, self._final[job_id] + LOG_SETTLE_S - time.time()))
        limiter = log_limiter(self.poll_group())
        query = f'resource.type="ml_job" AND resource.labels.job_id="{job_id}"'
        if cursor["ts"]:
            since = datetime.fromtimestamp(epoch(cursor["ts"]) - LOG_LOOKBACK_S, tz=UTC)
            query += f' AND timestamp>="{since.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}"'
        body: dict[str, Any] = {
            "resourceNames": [f"projects/{handle.get('project') or access.project}"],
            "filter": query,
            "orderBy": "timestamp asc",
            "pageSize": 1000,
        }
        lines: list[str] = []
        seen: dict[str, float] = dict(cursor["seen"])
        newest = cursor["ts"]

        def take(entries: list[dict[str, Any]]) -> None:
            nonlocal newest
            for entry in entries:
                if entry.get("insertId") in seen:
                    continue
                stamp = entry.get("timestamp") or newest or "1970-01-01T00:00:00Z"
                seen[entry.get("insertId", "")] = epoch(stamp)
                newest = stamp if newest is None or epoch(stamp) > epoch(newest) else newest
                text = str(
                    entry.get("textPayload") or entry.get("jsonPayload", {}).get("message", "")
                )
                task = entry.get("resource", {}).get("labels", {}).get("task_name", "")
                shown = f"{task}: {text}" if handle.get("replicas", 1) > 1 and task else text
                lines.extend(relayed_lines(shown))  # no line, escape or control of the step's

        for _ in range(FINAL_LOG_PAGES if final else 1):
            if not final and not limiter.try_acquire():  # a last read takes no token
                break
            answer = await access.log_entries(body)
            take(answer.get("entries", []))
            if not answer.get("nextPageToken"):
                break
            body["pageToken"] = answer["nextPageToken"]
        else:
            if final and answer.get("nextPageToken"):  # the end (a traceback) matters most
                take(await self._last_entries(access, body, query, newest, lines))
        if newest:  # keep ids only inside the look-back window
            floor = epoch(newest) - LOG_LOOKBACK_S
            seen = {key: stamp for key, stamp in seen.items() if stamp >= floor}
        return lines, {"ts": newest, "seen": seen}

    @staticmethod
    async def _last_entries(
        access: GoogleAccess, body: dict[str, Any], query: str, newest: str | None, lines: list[str]
    ) -> list[dict[str, Any]]:
        """A finished job's last page of entries, when its last read stopped at
        ``FINAL_LOG_PAGES`` with more to come; ``lines`` gets a line saying some were left out."""
        after = f' AND timestamp>"{newest}"' if newest else ""
        body = {**body, "filter": query + after, "orderBy": "timestamp desc"}
        body.pop("pageToken", None)
        answer = await access.log_entries(body)
        entries = answer.get("entries", [])
        if answer.get("nextPageToken"):  # more than this page: some were left out
            lines.append(
                f"[stepop] More than {FINAL_LOG_PAGES * body['pageSize']} log lines were unread "
                "when the job ended: the lines before its last "
                f"{len(entries)} are left out here (Cloud Logging has them all)."
            )
        return entries[::-1]

    async def astop(self, handle: dict[str, Any]) -> None:
        from google.api_core import exceptions

        async with self.access.ajobs() as client:
            with contextlib.suppress(exceptions.FailedPrecondition, exceptions.BadRequest):
                await client.cancel_custom_job(name=handle["name"])  # refused when already ended
