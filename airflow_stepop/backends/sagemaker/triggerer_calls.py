"""The SageMaker backend's triggerer side, which ``SageMakerBackend`` inherits: the amazon
provider's async hooks (aiobotocore, ``clients``) for the watched jobs' states and their log
lines (``logs``), and StopTrainingJob on kill. The worker's calls are ``backend``'s.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from airflow_stepop.backends.ratelimit import list_limiter
from airflow_stepop.backends.sagemaker.job import billing_facts, error_code, map_status
from airflow_stepop.backends.sagemaker.logs import read_new_lines

if TYPE_CHECKING:
    from airflow_stepop.backends.base import JobStatus
    from airflow_stepop.backends.sagemaker.clients import Clients

# ListTrainingJobs asks from the oldest watched job's submit time, less this margin (clock skew).
LIST_WINDOW_SLACK = 300.0
LIST_MAX_PAGES = 50  # 5000 jobs in progress in the window; any beyond are described


class SageMakerTriggererCalls:
    """``SageMakerBackend``'s async calls, with the job phases and ends they keep."""

    _clients: Clients
    _phase: dict[str, str]  # job -> last SecondaryStatus seen by astatus
    _final: set[str]  # jobs seen ended: their next log read is their last

    def prepare_async(self) -> None:
        self._clients.prepare()

    def forget(self, handle: dict[str, Any]) -> None:
        self._phase.pop(handle["job_id"], None)
        self._final.discard(handle["job_id"])

    async def aclose(self) -> None:
        await self._clients.aclose()

    async def adescribe(self, handle: dict[str, Any]) -> dict[str, Any]:
        client = await self._clients.get("sagemaker")
        return await client.describe_training_job(TrainingJobName=handle["job_id"])

    async def astatus(self, handle: dict[str, Any]) -> JobStatus:
        description = await self.adescribe(handle)
        status = map_status(description)
        self._phase[handle["job_id"]] = description.get("SecondaryStatus", "")
        if status.terminal:
            self._final.add(handle["job_id"])  # the next alogs call reads everything left
            # what the operator reports (billing) rides in the event: no Describe on the worker
            status = replace(status, details=billing_facts(description))
        return status

    async def astatuses(self, handles: list[dict[str, Any]]) -> dict[str, JobStatus]:
        """The watched jobs still in progress, from ListTrainingJobs pages of 100.

        Only InProgress jobs of the watched jobs' creation window are listed, oldest first, so
        the pages grow with the running jobs, not with the account's history. A watched job
        missing from them has ended (or hides beyond the last page read): the poller describes
        it, which is the one describe its final facts need anyway.
        """
        wanted = {h["job_id"] for h in handles}
        stamps = [float(h.get("submitted_at") or 0) for h in handles]
        kwargs: dict[str, Any] = {
            "MaxResults": 100,
            "StatusEquals": "InProgress",
            "SortBy": "CreationTime",
            "SortOrder": "Ascending",
        }
        if min(stamps) > 0:
            kwargs["CreationTimeAfter"] = min(stamps) - LIST_WINDOW_SLACK
            kwargs["CreationTimeBefore"] = max(stamps) + LIST_WINDOW_SLACK
        out: dict[str, JobStatus] = {}
        limiter = list_limiter(self.poll_group())
        client = await self._clients.get("sagemaker")
        for _ in range(LIST_MAX_PAGES):
            await limiter.aacquire()
            answer = await client.list_training_jobs(**kwargs)
            for summary in answer.get("TrainingJobSummaries", []):
                name = summary["TrainingJobName"]
                if name in wanted:
                    out[name] = map_status(summary)
                    self._phase[name] = summary.get("SecondaryStatus", "")
            if len(out) == len(wanted) or not answer.get("NextToken"):
                break
            kwargs["NextToken"] = answer["NextToken"]
        return out

    async def alogs(self, handle: dict[str, Any], cursor: Any) -> tuple[list[str], Any]:
        job = handle["job_id"]
        return await read_new_lines(
            lambda: self._clients.get("logs"),
            job,
            cursor,
            final=job in self._final,
            phase=self._phase.get(job, ""),
            allowed=lambda: self._log_call_allowed(job),
        )

    def _log_call_allowed(self, job: str) -> bool:
        """A token of the log budget for one call; a finished job's last read needs none."""
        from airflow_stepop.backends.ratelimit import log_limiter

        return job in self._final or log_limiter(self.poll_group()).try_acquire()

    async def astop(self, handle: dict[str, Any]) -> None:
        client = await self._clients.get("sagemaker")
        try:
            await client.stop_training_job(TrainingJobName=handle["job_id"])
        except Exception as exc:
            if error_code(exc) != "ValidationException":
                raise
