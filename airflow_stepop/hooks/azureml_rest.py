"""Azure ML's REST API (ARM jobs, environments, computes; run history) through azure-core.

``azure-ai-ml``'s MLClient is synchronous and slow to import (seconds), so the backend speaks
the same documented REST API through azure-core pipelines instead: the sync one on the worker,
the async one (aiohttp, ``azure.identity.aio``) in the triggerer, so polling never blocks the
event loop. azure-core's retry policy retries 429 and 5xx with jittered exponential backoff
and honours ``Retry-After``; what is still failing after its retries reaches the trigger,
which backs off (``is_transient``). Log files are read from the URLs run history gives (SAS
URLs on Azure) without the bearer token: the token is for the management endpoint only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

API_VERSION = "2024-04-01"
HISTORY_API = "/history/v1.0"
RETRIES = 3  # per call, by azure-core; then the trigger's own backoff takes over
_history_urls: dict[str, str] = {}  # endpoint + workspace -> run history base URL (per process)


def _policies(credential: Any, scope: str | None, *, asynchronous: bool) -> list[Any]:
    from azure.core.pipeline import policies

    if asynchronous:
        retry: Any = policies.AsyncRetryPolicy(retry_total=RETRIES, retry_backoff_max=30)
        auth: Any = policies.AsyncBearerTokenCredentialPolicy(credential, scope) if scope else None
    else:
        retry = policies.RetryPolicy(retry_total=RETRIES, retry_backoff_max=30)
        auth = policies.BearerTokenCredentialPolicy(credential, scope) if scope else None
    chain = [policies.HeadersPolicy(), policies.UserAgentPolicy("airflow-stepop"), retry]
    return [*chain, auth] if auth else chain


def _url(path: str, params: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    query = {"api-version": API_VERSION, **(params or {})}
    return path, query


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    default = {"https": 443, "http": 80}.get(parts.scheme.lower())
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port or default


def _next_link(page: dict[str, Any], arm_url: str) -> str | None:
    """A list page's ``nextLink``, if it points at the management endpoint: the bearer token
    goes nowhere else."""
    link = page.get("nextLink")
    return link if link and _origin(link) == _origin(arm_url) else None


def _raise_for(response: Any) -> None:
    """An ``HttpResponseError`` carrying ARM's own error code and message."""
    if response.status_code < 400:
        return
    from azure.core.exceptions import (
        HttpResponseError,
        ResourceExistsError,
        ResourceNotFoundError,
    )

    try:
        error = response.json().get("error") or {}
    except Exception:
        error = {}
    message = f"({error.get('code') or response.status_code}) {error.get('message') or ''}"
    cls = {404: ResourceNotFoundError, 409: ResourceExistsError}.get(
        response.status_code, HttpResponseError
    )
    raise cls(message=message.strip(), response=response)


def epoch(stamp: str | None) -> float | None:
    """An RFC 3339 time (``systemData.createdAt``) in epoch seconds; None when unreadable."""
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _length(content_range: str | None) -> int | None:
    """The whole file's length from ``Content-Range: bytes a-b/N`` (or ``bytes */N``)."""
    total = (content_range or "").rpartition("/")[2].strip()
    return int(total) if total.isdigit() else None


def is_transient_error(exc: BaseException) -> bool:
    """Throttling (429), 5xx and connection problems, from azure-core's sync or async side."""
    from azure.core.exceptions import HttpResponseError, ServiceRequestError, ServiceResponseError

    if isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        return True
    if isinstance(exc, HttpResponseError):
        status = exc.status_code or 0
        return status == 429 or status >= 500
    return isinstance(exc, (ConnectionError, TimeoutError))


class ArmClient:
    """Synchronous calls for the worker (submit, re-attach, cancel)."""

    def __init__(self, hook: Any) -> None:
        from azure.core import PipelineClient

        self.workspace = hook.workspace
        credential = hook.get_credential()
        self._client = PipelineClient(
            self.workspace.arm_url,
            policies=_policies(credential, self.workspace.scope, asynchronous=False),
        )

    def _send(self, method: str, url: str, query: dict[str, Any] | None, body: Any = None) -> Any:
        from azure.core.rest import HttpRequest

        request = HttpRequest(method, url, params=query or {}, json=body)
        response = self._client.send_request(request, connection_verify=self.workspace.verify)
        _raise_for(response)
        return response.json() if response.content else None

    def request(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        url, query = _url(path, params)
        return self._send(method, self.workspace.arm_url + url, query, body)

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, **params)

    def pages(
        self, path: str, before: Callable[[], Any] | None = None, **params: Any
    ) -> Iterator[dict[str, Any]]:
        """A list's pages, following each page's ``nextLink`` (the sync twin of
        ``AsyncArmClient.pages``): a list answers at most 100 items a page."""
        url, query = _url(path, params)
        link: str | None = self.workspace.arm_url + url
        while link:
            if before is not None:
                before()
            page = self._send("GET", link, query) or {}
            yield page
            link, query = _next_link(page, self.workspace.arm_url), None

    def put(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, body)

    def post(self, path: str) -> Any:
        return self.request("POST", path)


class AsyncArmClient:
    """Async calls for the triggerer: job state, run history details, log files, cancel.

    One open pipeline (aiohttp session) per kind and event loop, shared by the poll group's
    triggers: opening one per call costs CPU and a TLS handshake. ``aclose`` closes them.
    """

    def __init__(self, workspace: Any, credential: Any) -> None:
        self.workspace = workspace
        self.credential = credential
        self._clients: dict[tuple[bool, int], Any] = {}

    async def _pipeline(self, *, authenticated: bool = True) -> Any:
        import asyncio

        from azure.core import AsyncPipelineClient

        key = (authenticated, id(asyncio.get_running_loop()))
        if key not in self._clients:
            scope = self.workspace.scope if authenticated else None
            self._clients[key] = AsyncPipelineClient(  # its session opens on the first call
                self.workspace.arm_url,
                policies=_policies(self.credential, scope, asynchronous=True),
            )
        return self._clients[key]

    async def _send(
        self, method: str, url: str, params: dict[str, Any] | None, authenticated: bool = True
    ) -> Any:
        from azure.core.rest import HttpRequest

        client = await self._pipeline(authenticated=authenticated)
        request = HttpRequest(method, url, params=params or {})
        response = await client.send_request(request, connection_verify=self.workspace.verify)
        _raise_for(response)  # not streamed: the body is read already
        return response

    async def get(self, path: str, **params: Any) -> Any:
        url, query = _url(path, params)
        response = await self._send("GET", self.workspace.arm_url + url, query)
        return response.json()

    async def pages(
        self, path: str, before: Callable[[], Awaitable[Any]] | None = None, **params: Any
    ) -> AsyncIterator[dict[str, Any]]:
        """A list's pages, following each page's ``nextLink`` as the service gives it (on the
        management endpoint only: the bearer token goes nowhere else); ``before`` is awaited
        before each call (the poll group's list limiter)."""
        url, query = _url(path, params)
        link: str | None = self.workspace.arm_url + url
        while link:
            if before is not None:
                await before()
            page = (await self._send("GET", link, query)).json()
            yield page
            link, query = _next_link(page, self.workspace.arm_url), None

    async def post(self, path: str) -> None:
        url, query = _url(path, None)
        await self._send("POST", self.workspace.arm_url + url, query)

    async def history_url(self) -> str:
        """The workspace's run history base (from its discovery document), cached per process."""
        key = f"{self.workspace.arm_url}{self.workspace.path}".lower()
        if key not in _history_urls:
            ws = await self.get(self.workspace.path)
            discovery = ws["properties"]["discoveryUrl"]
            response = await self._send("GET", discovery, None)
            _history_urls[key] = response.json()["history"].rstrip("/")
        return _history_urls[key]

    async def run_details(self, job: str) -> dict[str, Any]:
        """Run history's view of a job: times, ``error``, ``logFiles`` (name -> URL)."""
        base = await self.history_url()
        url = f"{base}{HISTORY_API}{self.workspace.path}/runs/{job}/details"
        return (await self._send("GET", url, None)).json()

    async def read_log(self, url: str, offset: int, size: int) -> tuple[bytes, int | None]:
        """At most ``size`` bytes of a log file from ``offset``, and the file's length where the
        answer tells it (a SAS URL: no bearer token is sent). The range is bounded: an open one
        would download all the rest of a long log to keep ``size`` of it."""
        from azure.core.rest import HttpRequest

        client = await self._pipeline(authenticated=False)
        request = HttpRequest("GET", url, headers={"Range": f"bytes={offset}-{offset + size - 1}"})
        response = await client.send_request(request, connection_verify=self.workspace.verify)
        length = _length(response.headers.get("Content-Range"))
        if response.status_code == 416:  # nothing past offset yet
            return b"", length
        _raise_for(response)
        body = response.content
        if response.status_code == 206:
            return body[:size], length
        return body[offset : offset + size], len(body)  # the Range was ignored: the whole file

    async def aclose(self) -> None:
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.close()
        close = getattr(self.credential, "close", None)
        if close is not None:
            await close()
