"""The Kubernetes backend's triggerer side, which ``KubernetesBackend`` inherits.

One ``kubernetes_asyncio`` API client per backend object (a poll group's poller keeps one for
as long as it has triggers), on a configuration of its own (``clients``). Every read is raw
JSON read to a bound (``_read_bounded``), and a List is ``MAX_PAGES`` pages at most: the
triggerer is shared by every deferred task, and a List of Jobs or a pod log could be of any
size.

* ``astatuses``: per namespace, one List of the watched task instances' Jobs and one of their
  pods (label selector ``stepop.io/task in (...)``, ``SELECTOR_CHUNK`` tasks a call), however
  many jobs wait; ``astatus``: one Job GET and one pod List.
  A Job still without a pod after ``PODLESS_S`` is looked up in its namespace's
  ``FailedCreate`` events, one List per namespace at most every ``EVENTS_EVERY_S``, so the task
  log says why (an exceeded quota).
* ``alogs``: the pods' logs (``logs``), the pods as the last poll listed them.
* ``astop``: deletes the Job with foreground propagation: its pods are stopped (SIGTERM, then
  SIGKILL after their grace period) and the Job stays readable until they are gone. A pod's
  log goes with the pod, so before the delete each running pod's log is followed from the last
  line relayed to the container's end (``FOLLOW_SECONDS`` at most): what the step printed as it
  stopped is in the Job's last read.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from urllib.parse import quote

from airflow_stepop.backends.base import JobStatus
from airflow_stepop.backends.kubernetes import logs
from airflow_stepop.backends.kubernetes.clients import ClusterAccess, async_client, read_access
from airflow_stepop.backends.kubernetes.job import (
    CONTAINER,
    JOB_NAME_LABEL,
    NO_PODS,
    age,
    event_time,
    job_status,
    owned_pods,
)
from airflow_stepop.backends.kubernetes.manifest import MANAGED_BY, TASK_LABEL
from airflow_stepop.backends.naming import task_digest
from airflow_stepop.backends.ratelimit import list_limiter, log_limiter

SELECTOR_CHUNK = 100  # task hashes in one label selector: ~1.2 KB of query
PAGE_ITEMS = 200
MAX_PAGES = 10
MAX_PAGE_BYTES = 32 << 20
MAX_OBJECT_BYTES = 4 << 20
REQUEST_TIMEOUT_S = 60
FOLLOW_SECONDS = 120.0  # a stopping pod's grace period (30 s by default) and its last upload
FOLLOW_BYTES = 16 << 20  # what a stop follows of its pods' logs, all of them together
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
PODLESS_S = 5.0  # a Job with no pod this long: its FailedCreate events are read
EVENTS_EVERY_S = 15.0  # a namespace's FailedCreate events are read at most this often


class ApiError(RuntimeError):
    """An API call the server answered with an error Status (its code and its message)."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"Kubernetes API answered HTTP {status}: {message}")


def status_error(status: int, body: bytes) -> ApiError:
    try:
        message = json.loads(body).get("message") or ""
    except ValueError:
        message = body[:300].decode("utf-8", "replace")
    return ApiError(status, message)


class KubernetesTriggererCalls:
    """``KubernetesBackend``'s async calls, with the pods and ends they keep per job."""

    kubernetes_conn_id: str | None
    _access: ClusterAccess | None
    _client: Any
    _pods: dict[str, list[dict[str, Any]]]  # job -> its pods as last listed
    _ended: set[str]  # jobs a poll saw end: their last log read takes no token
    _stopped: set[str]  # jobs this process deleted: gone means stopped
    _stamps: dict[str, dict[str, str]]  # job -> pod -> the stamp of its last line relayed
    _followers: dict[str, dict[str, asyncio.Task[str]]]  # job -> pod -> its log to its end
    _stopping: dict[str, list[dict[str, Any]]]  # job -> its pods that ran when it was stopped
    _refusals: dict[str, tuple[float, dict[str, str]]]  # namespace -> (read at, uid -> message)

    def poll_group(self) -> str:
        """One cluster (connection), one group: its API server rate-limits every client."""
        return f"kubernetes:{self.kubernetes_conn_id}"

    def prepare_async(self) -> None:
        """The connection, read here in a thread (a secrets backend call may block)."""
        import kubernetes_asyncio.client  # noqa: F401 - its first import takes a while

        self._access = read_access(self.kubernetes_conn_id)

    async def _api(self) -> Any:
        if self._client is None:
            if self._access is None:
                self.prepare_async()  # a caller that skipped it (a script)
            assert self._access is not None
            self._client = await async_client(self._access)
        return self._client

    async def _read_bounded(
        self, path: str, query: dict[str, Any], *, limit: int, method: str = "GET",
        body: Any = None,
    ) -> bytes:  # fmt: skip
        """One API call's answer, at most ``limit`` bytes (more: a failure, never a partial
        document); an error Status raises ``ApiError``. A 401 makes the client again once: a
        kubeconfig's exec plugin (EKS, GKE) gives tokens of minutes, and only a new client asks
        it for another."""
        try:
            return await self._call(path, query, limit=limit, method=method, body=body)
        except ApiError as exc:
            if exc.status != 401:
                raise
        await self.aclose()
        return await self._call(path, query, limit=limit, method=method, body=body)

    async def _call(
        self, path: str, query: dict[str, Any], *, limit: int, method: str, body: Any
    ) -> bytes:
        client = await self._api()
        response = await client.call_api(
            path, method, query_params=list(query.items()),
            header_params={"Accept": "application/json, text/plain, */*",
                           "Content-Type": "application/json"},
            body=body, auth_settings=["BearerToken"], _preload_content=False,
            _request_timeout=REQUEST_TIMEOUT_S,
        )  # fmt: skip
        try:
            data = bytearray()
            async for chunk in response.content.iter_chunked(64 * 1024):
                data += chunk
                if len(data) > limit:
                    break
        finally:
            response.release()
        if response.status >= 400:
            raise status_error(response.status, bytes(data[:65536]))
        if len(data) > limit:
            raise ApiError(response.status, f"the answer to {path} is over {limit} bytes")
        return bytes(data)

    async def _list(self, path: str, selector: str) -> list[dict[str, Any]]:
        """The items of a List, page by page (each with a List token), ``MAX_PAGES`` pages at
        most: what a round leaves out is asked of each job on its own."""
        items: list[dict[str, Any]] = []
        query: dict[str, Any] = {"labelSelector": selector, "limit": PAGE_ITEMS}
        limiter = list_limiter(self.poll_group())
        for _ in range(MAX_PAGES):
            await limiter.aacquire()
            page = json.loads(await self._read_bounded(path, query, limit=MAX_PAGE_BYTES))
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                break
            query["continue"] = token
        return items

    async def astatus(self, handle: dict[str, Any]) -> JobStatus:
        namespace, name = handle["namespace"], handle["job_id"]
        try:
            job = json.loads(await self._read_bounded(
                f"/apis/batch/v1/namespaces/{namespace}/jobs/{quote(name)}", {},
                limit=MAX_OBJECT_BYTES,
            ))  # fmt: skip
        except ApiError as exc:
            if exc.status != 404:
                raise
            return self._gone(handle)
        pods = await self._list(f"/api/v1/namespaces/{namespace}/pods", f"{JOB_NAME_LABEL}={name}")
        return await self._with_events(handle, job, self._seen(handle, job, pods))

    async def astatuses(self, handles: list[dict[str, Any]]) -> dict[str, JobStatus]:
        """Per namespace, the watched tasks' Jobs and pods in two Lists (per chunk of tasks);
        a job they leave out (deleted) is asked with ``astatus``."""
        out: dict[str, JobStatus] = {}
        by_namespace: dict[str, list[dict[str, Any]]] = {}
        for handle in handles:
            by_namespace.setdefault(handle["namespace"], []).append(handle)
        for namespace, group in sorted(by_namespace.items()):
            for start in range(0, len(group), SELECTOR_CHUNK):
                chunk = group[start : start + SELECTOR_CHUNK]
                digests = sorted({task_digest(h["task_key"]) for h in chunk})
                selector = f"{MANAGED_BY[0]}={MANAGED_BY[1]},{TASK_LABEL} in ({','.join(digests)})"
                try:
                    jobs = await self._list(f"/apis/batch/v1/namespaces/{namespace}/jobs",
                                            selector)  # fmt: skip
                    pods = await self._list(f"/api/v1/namespaces/{namespace}/pods", selector)
                except (ApiError, ValueError) as exc:
                    if isinstance(exc, ApiError) and self.is_transient(exc):
                        raise  # throttled: the whole round waits, as the poller backs off
                    continue  # this namespace's trouble (a 403, a page too large): its jobs
                    # are asked one by one, and no other namespace's steps wait on it
                by_job: dict[str, list[dict[str, Any]]] = {}
                for pod in pods:
                    labels = (pod.get("metadata") or {}).get("labels") or {}
                    by_job.setdefault(labels.get(JOB_NAME_LABEL, ""), []).append(pod)
                listed = {(job.get("metadata") or {}).get("name"): job for job in jobs}
                for handle in chunk:
                    job = listed.get(handle["job_id"])
                    if job is not None:
                        status = self._seen(handle, job, by_job.get(handle["job_id"], []))
                        out[handle["job_id"]] = await self._with_events(handle, job, status)
        return out

    async def _with_events(self, handle: dict[str, Any], job: dict, status: JobStatus) -> JobStatus:
        """A waiting Job that has made no pod for ``PODLESS_S``: its last ``FailedCreate``
        event says why (a namespace's quota, a missing service account, a policy); the status
        again with that reason."""
        podless = (status.state == "pending" and not status.queued and not status.reason) or (
            status.state == "failed" and (status.reason or "").startswith(NO_PODS)
        )
        if not podless or self._pods.get(handle["job_id"]) or age(job) < PODLESS_S:
            return status
        refusals = await self._refused_jobs(handle["namespace"])
        message = refusals.get((job.get("metadata") or {}).get("uid", ""))
        if message is None:
            return status
        return self._seen(handle, job, self._pods.get(handle["job_id"], []), message)

    async def _refused_jobs(self, namespace: str) -> dict[str, str]:
        """Job uid -> its last ``FailedCreate`` message in ``namespace``: one bounded List of
        the namespace's FailedCreate events (a page, ``MAX_OBJECT_BYTES``) at most every
        ``EVENTS_EVERY_S``, however many Jobs wait; best-effort (without the right to list
        events, or on any error, the NoPods message still points at them)."""
        read_at, refusals = self._refusals.get(namespace, (float("-inf"), {}))
        if time.monotonic() - read_at < EVENTS_EVERY_S:
            return refusals
        refusals = {}
        query = {"fieldSelector": "involvedObject.kind=Job,reason=FailedCreate",
                 "limit": PAGE_ITEMS, "resourceVersion": "0"}  # fmt: skip
        try:
            await list_limiter(self.poll_group()).aacquire()
            page = json.loads(await self._read_bounded(
                f"/api/v1/namespaces/{namespace}/events", query, limit=MAX_OBJECT_BYTES,
            ))  # fmt: skip
            for event in sorted(page.get("items") or [], key=event_time):
                uid = str((event.get("involvedObject") or {}).get("uid") or "")
                refusals[uid] = str(event.get("message") or "")[:2000]
        except asyncio.CancelledError:
            raise
        except Exception:  # an extra read: its failure must not fail the round
            refusals = {}
        self._refusals[namespace] = (time.monotonic(), refusals)
        return refusals

    def _seen(
        self, handle: dict[str, Any], job: dict, pods: list[dict], failed_create: str | None = None
    ) -> JobStatus:
        """The Job's state from it and the pods it owns (a pod's labels alone anyone may set);
        the pods are kept for its log reads."""
        pods = owned_pods(job, pods)
        status = job_status(job, pods, schedule_timeout_s=float(handle["schedule_timeout_s"]),
                            failed_create=failed_create)  # fmt: skip
        self._pods[handle["job_id"]] = pods
        if status.terminal:
            self._ended.add(handle["job_id"])
        return status

    def _gone(self, handle: dict[str, Any]) -> JobStatus:
        """A Job the API no longer has: stopped where this process deleted it, else failed."""
        self._ended.add(handle["job_id"])
        if handle["job_id"] in self._stopped:
            return JobStatus("stopped", "the Job was deleted (stopped)")
        return JobStatus(
            "failed",
            f"the Job {handle['job_id']} is gone from namespace {handle['namespace']}: someone "
            "deleted it, or its ttlSecondsAfterFinished ended before its end was read",
        )

    async def alogs(self, handle: dict[str, Any], cursor: Any) -> tuple[list[str], Any]:
        name, namespace = handle["job_id"], handle["namespace"]
        if name not in self._pods:  # a trigger's first read before a poll: the Job's own pods
            await self.astatus(handle)
        pods = self._pods.get(name, [])
        final = name in self._ended
        followed: dict[str, str] = {}
        if final and name in self._followers:  # stopped: the logs its pods took with them
            tasks = self._followers.pop(name)
            await asyncio.wait(tasks.values(), timeout=FOLLOW_SECONDS)
            followed = {pod: t.result() for pod, t in tasks.items() if t.done() and not
                        t.cancelled() and t.exception() is None}  # fmt: skip
            listed = {(pod.get("metadata") or {}).get("name") for pod in pods}
            pods = [*pods, *(p for p in self._stopping.pop(name, []) if p["metadata"]["name"]
                             not in listed)]  # fmt: skip
        limiter = log_limiter(self.poll_group())

        async def read_log(pod: str, query: dict[str, Any]) -> str:
            if pod in followed:
                return followed[pod]
            path = f"/api/v1/namespaces/{namespace}/pods/{quote(pod)}/log"
            try:
                data = await self._read_bounded(path, query, limit=int(query["limitBytes"]) * 2)
            except ApiError as exc:
                if exc.status in (400, 404):  # not started yet, or gone (deleted)
                    return ""
                raise
            return data.decode("utf-8", "replace")

        lines, after = await logs.read_new_lines(
            read_log, name, pods, cursor, final=final, allowed=limiter.try_acquire
        )
        self._stamps[name] = {pod: seen.get("time", "") for pod, seen in after["pods"].items()}
        return lines, after

    async def _follow(self, namespace: str, pod: str, since: str, limit: int) -> str:
        """A pod's log from ``since`` (a stamp) to its container's end, as much as
        ``FOLLOW_SECONDS`` and ``limit`` bytes allow: what a stopping step printed."""
        query: dict[str, Any] = {"container": CONTAINER, "timestamps": "true",
                                 "follow": "true", "limitBytes": limit}  # fmt: skip
        if since:
            query["sinceTime"] = since[:19] + "Z"
        client = await self._api()
        response = await client.call_api(
            f"/api/v1/namespaces/{namespace}/pods/{quote(pod)}/log", "GET",
            query_params=list(query.items()), auth_settings=["BearerToken"],
            _preload_content=False, _request_timeout=FOLLOW_SECONDS,
        )  # fmt: skip
        data = bytearray()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FOLLOW_SECONDS
        try:
            if response.status >= 400:
                return ""
            while len(data) < limit and loop.time() < deadline:
                try:
                    chunk = await asyncio.wait_for(
                        response.content.readany(), deadline - loop.time()
                    )
                except TimeoutError:
                    break
                if not chunk:
                    break
                data += chunk
        finally:
            response.release()
        return data.decode("utf-8", "replace")

    async def astop(self, handle: dict[str, Any]) -> None:
        name, namespace = handle["job_id"], handle["namespace"]
        self._stopped.add(name)
        if name not in self._followers:
            stamps = self._stamps.get(name, {})
            running = await self._running_pods(namespace, name)
            self._stopping[name] = running  # gone once stopped: their last read needs them
            share = max(1 << 20, FOLLOW_BYTES // max(1, len(running)))  # a stop's bytes, in all
            self._followers[name] = {
                pod["metadata"]["name"]: asyncio.ensure_future(
                    self._follow(namespace, pod["metadata"]["name"],
                                 stamps.get(pod["metadata"]["name"], ""), share)
                )
                for pod in running
            }  # fmt: skip
        path = f"/apis/batch/v1/namespaces/{handle['namespace']}/jobs/{quote(handle['job_id'])}"
        try:
            await self._read_bounded(
                path, {}, limit=MAX_OBJECT_BYTES, method="DELETE",
                body={"kind": "DeleteOptions", "apiVersion": "v1",
                      "propagationPolicy": "Foreground"},
            )  # fmt: skip
        except ApiError as exc:
            if exc.status != 404:  # already gone: nothing to stop
                raise

    async def _running_pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """The Job's running pods (none when it is gone already)."""
        try:
            job = json.loads(await self._read_bounded(
                f"/apis/batch/v1/namespaces/{namespace}/jobs/{quote(name)}", {},
                limit=MAX_OBJECT_BYTES,
            ))  # fmt: skip
        except ApiError as exc:
            if exc.status == 404:
                return []
            raise
        pods = await self._list(f"/api/v1/namespaces/{namespace}/pods", f"{JOB_NAME_LABEL}={name}")
        running = [pod for pod in pods if (pod.get("status") or {}).get("phase") == "Running"]
        return owned_pods(job, running)

    async def aclose(self) -> None:
        """Close the client; a stop's log followers end with it."""
        for tasks in self._followers.values():
            for task in tasks.values():
                task.cancel()
        self._followers.clear()
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    def forget(self, handle: dict[str, Any]) -> None:
        self._pods.pop(handle["job_id"], None)
        self._stamps.pop(handle["job_id"], None)
        self._stopping.pop(handle["job_id"], None)
        for task in self._followers.pop(handle["job_id"], {}).values():
            task.cancel()
        self._ended.discard(handle["job_id"])
        self._stopped.discard(handle["job_id"])

    def is_transient(self, exc: Exception) -> bool:
        """A throttled or failing server, or a connection that failed: the triggerer's
        (``ApiError``, aiohttp) and the worker's (the sync client's ``ApiException``, urllib3)."""
        status = getattr(exc, "status", None)
        if isinstance(status, int):
            return status in TRANSIENT_STATUS
        import aiohttp
        import urllib3

        return isinstance(exc, (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError,
                                urllib3.exceptions.HTTPError))  # fmt: skip
