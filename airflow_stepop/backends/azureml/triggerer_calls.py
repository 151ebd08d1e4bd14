"""The Azure ML backend's triggerer side, which ``AzureMLBackend`` inherits: async calls
(azure-core over aiohttp, ``azure.identity.aio``): one job GET per poll, or one List for all
watched jobs of a workspace (``astatuses``); run history details for the final error and
times, and for the log files, read at a bounded rate (``logs``); the cancel on kill. The
worker's calls are ``backend``'s.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from airflow_stepop.backends.azureml.config import TASK_TAG
from airflow_stepop.backends.azureml.launch import CLUSTER_PROPERTY, billing_facts, map_status
from airflow_stepop.backends.list_pages import WatchedPages
from airflow_stepop.backends.ratelimit import list_limiter, log_limiter
from airflow_stepop.hooks.azureml_rest import epoch

if TYPE_CHECKING:
    from airflow_stepop.backends.azureml.logs import LogRelay
    from airflow_stepop.backends.base import JobStatus


class AzureMLTriggererCalls:
    """``AzureMLBackend``'s async calls, with the async client and the job states they keep."""

    hook: Any
    workspace: Any
    _states: dict[str, str]  # job -> last status seen by astatus
    _logs: LogRelay
    _async: Any  # the async client (``aclient``), made when first needed

    def prepare_async(self) -> None:
        """The workspace (the connection) and the async client with its credential
        (``azure.identity.aio`` on a first import), made in a thread."""
        self.aclient  # noqa: B018 - built and kept

    @property
    def aclient(self) -> Any:
        if self._async is None:
            from airflow_stepop.hooks.azureml_rest import AsyncArmClient

            self._async = AsyncArmClient(self.workspace, self.hook.get_async_credential())
        return self._async

    async def astatus(self, handle: dict[str, Any]) -> JobStatus:
        name = handle["job_id"]
        resource = await self.aclient.get(f"{self.workspace.path}/jobs/{name}")
        state = resource["properties"]["status"]
        self._states[name] = state
        status = map_status(state)
        if not status.terminal:
            return status
        details = await self.aclient.run_details(name)
        self._logs.ended(name, details)
        error = (details.get("error") or {}).get("error")
        final = map_status(state, error)
        own = resource["properties"].get("properties") or {}
        if final.capacity and own.get(CLUSTER_PROPERTY):  # a cluster's size: nothing to try
            final = replace(final, capacity=False)  # the step fails with Azure ML's reason
        return replace(final, details=billing_facts(resource, details))

    async def astatuses(self, handles: list[dict[str, Any]]) -> dict[str, JobStatus]:
        """Jobs_List pages (our tag, newest first) while watched jobs are missing from them: N
        jobs cost about ceil(N / 100) calls a poll. Read while they can still spare describes
        (``WatchedPages``; the poller describes the jobs they leave out), up to one page older
        than the oldest watched job."""
        if not handles:
            return {}
        stamps = [epoch(h.get("create_time")) for h in handles]
        oldest = None if None in stamps else min(stamps, default=None)
        watched = WatchedPages((h["job_id"] for h in handles), oldest)
        out: dict[str, JobStatus] = {}
        limiter = list_limiter(self.poll_group())
        path = f"{self.workspace.path}/jobs"
        async with contextlib.aclosing(
            self.aclient.pages(path, before=limiter.aacquire, tag=TASK_TAG)
        ) as pages:
            async for page in pages:
                created: list[float | None] = []
                for resource in page.get("value", []):
                    created.append(epoch((resource.get("systemData") or {}).get("createdAt")))
                    name = resource.get("name")
                    if watched.answers(name):
                        state = resource["properties"]["status"]
                        self._states[name] = state
                        out[name] = map_status(state)
                if watched.last(created):
                    break
        return out

    async def alogs(self, handle: dict[str, Any], cursor: Any) -> tuple[list[str], Any]:
        name = handle["job_id"]
        return await self._logs.read(
            name, self._states.get(name), cursor,
            client=lambda: self.aclient, limiter=lambda: log_limiter(self.poll_group()),
        )  # fmt: skip

    def forget(self, handle: dict[str, Any]) -> None:
        self._states.pop(handle["job_id"], None)
        self._logs.forget(handle["job_id"])

    async def aclose(self) -> None:
        client, self._async = self._async, None
        if client is not None:
            await client.aclose()

    async def astop(self, handle: dict[str, Any]) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        with contextlib.suppress(ResourceNotFoundError):
            await self.aclient.post(f"{self.workspace.path}/jobs/{handle['job_id']}/cancel")
